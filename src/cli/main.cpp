// The `tessera` binary: dispatches to the registered subcommands (see command.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera;
  CLI::App app{"tessera: an inference server for DeepSeek-V3-family Mixture-of-Experts models"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one JSON object per line on stderr (for log collectors)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const cli::Command& a, const cli::Command& b) { return a.name < b.name; });
  // Parents first, then their subcommands; children's actions come first in `actions` so that
  // the most specific parsed command runs.
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions, parent_actions;
  std::map<std::string, CLI::App*> apps;
  for (auto& c : registry) {
    if (!c.parent.empty()) continue;
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    sub->fallthrough();
    apps[c.name] = sub;
    parent_actions.emplace_back(sub, c.setup(*sub));
  }
  for (auto& c : registry) {
    if (c.parent.empty()) continue;
    auto it = apps.find(c.parent);
    if (it == apps.end()) {
      std::fprintf(stderr, "internal error: subcommand '%s' of unknown command '%s'\n", c.name.c_str(), c.parent.c_str());
      return 2;
    }
    CLI::App* sub = it->second->add_subcommand(c.name, c.help);
    sub->fallthrough();
    actions.emplace_back(sub, c.setup(*sub));
  }
  actions.insert(actions.end(), parent_actions.begin(), parent_actions.end());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  core::init_logging(log_level, core::parse_log_format(log_format));
  // The error that ends a command: a log record when logs are JSON, so that every line on stderr
  // stays one object; the plain "error: ..." line otherwise.
  auto report = [](const char* what) {
    if (core::log_format() == core::LogFormat::kJson) {
      spdlog::error("{}", what);
      spdlog::default_logger()->flush();
    } else {
      std::fprintf(stderr, "error: %s\n", what);
    }
  };
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    try {
      return action();
    } catch (const std::exception& e) {
      report(e.what());
      return 1;
    }
  }
  return 1;
}
