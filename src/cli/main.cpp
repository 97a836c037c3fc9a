// The `tessera` binary: dispatches to the registered subcommands (see command.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

namespace {

// Every numeric option of every command, whatever it is declared with: no empty item in a list
// ("1,,2"), and for floating-point options a finite number (CLI11 reads "nan" and "inf", and NaN
// passes every range check). Applied here once, so an option added later gets it too.
void check_numeric_options(CLI::App& app) {
  const CLI::Validator not_empty(
      [](std::string& s) -> std::string {
        return s.find_first_not_of(" \t") == std::string::npos ? "an empty value or list item is not a number" : "";
      },
      "");
  const CLI::Validator finite(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (end != s.c_str() && !std::isfinite(d)) return "'" + s + "' is not a finite number";
        return "";
      },
      "");
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    const bool is_float = base.find("FLOAT") != std::string::npos;
    if (is_float || base.find("INT") != std::string::npos) opt->check(not_empty);
    if (is_float) opt->check(finite);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_numeric_options(*sub);
}

// What the command line check needs to know of the options of one long name, over every command.
struct NumericName {
  bool all_numeric = true;  // every option of this name takes numbers: an empty value is never one
  bool all_float = true;    // and floating-point ones: nan and inf are refused
  char delimiter = '\0';    // a list separator one of them splits on
};

void numeric_names(CLI::App& app, std::map<std::string, NumericName>& out) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    const bool is_float = base.find("FLOAT") != std::string::npos;
    const bool numeric = is_float || base.find("INT") != std::string::npos;
    for (const std::string& name : opt->get_lnames()) {
      NumericName& n = out["--" + name];
      n.all_numeric &= numeric;
      n.all_float &= is_float;
      if (opt->get_delimiter() != '\0') n.delimiter = opt->get_delimiter();
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) numeric_names(*sub, out);
}

// The same checks on the command line itself, before CLI11 parses it: CLI11 drops the empty items
// of a delimited list ("1,,16" reads as 1,16) before any validator sees them, and its range checks
// would otherwise answer `nan` or "" first with a less helpful message. A name that is numeric in
// one command and text in another is left to the validators.
void check_command_line(CLI::App& app, int argc, char** argv) {
  std::map<std::string, NumericName> names;
  numeric_names(app, names);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0) continue;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    } else {
      continue;
    }
    const auto it = names.find(arg);
    if (it == names.end() || !it->second.all_numeric) continue;
    const char d = it->second.delimiter;
    size_t item = 1, start = 0;
    for (;;) {
      const size_t end = d == '\0' ? std::string::npos : value.find(d, start);
      const std::string piece = value.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (piece.find_first_not_of(" \t") == std::string::npos)
        throw CLI::ValidationError(arg, d == '\0' ? std::string("an empty value is not a number")
                                                  : "item " + std::to_string(item) + " of '" + value +
                                                        "' is empty (a leading, trailing or doubled delimiter?)");
      if (it->second.all_float) {
        char* stop = nullptr;
        const double x = std::strtod(piece.c_str(), &stop);
        if (stop != piece.c_str() && !std::isfinite(x))
          throw CLI::ValidationError(arg, "'" + piece + "' is not a finite number");
      }
      if (end == std::string::npos) break;
      start = end + 1;
      ++item;
    }
  }
}

}  // namespace
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
      std::fprintf(stderr, "internal error: subcommand '%s' of unknown command '%s'\n", c.name.c_str(),
                   c.parent.c_str());
      return 2;
    }
    CLI::App* sub = it->second->add_subcommand(c.name, c.help);
    sub->fallthrough();
    actions.emplace_back(sub, c.setup(*sub));
  }
  actions.insert(actions.end(), parent_actions.begin(), parent_actions.end());
  cli::check_numeric_options(app);
  try {
    cli::check_command_line(app, argc, argv);
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
