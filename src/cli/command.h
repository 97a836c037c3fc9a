// Subcommands of the `tessera` binary register themselves here: one file per subcommand
// (cmd_<name>.cpp) defines a static CommandRegistration. The cli sources are compiled straight
// into the executable, so static registration is never dropped by the linker.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds the subcommand's options to `sub` and returns the action to run when it was chosen.
  // The action returns the process exit code.
  std::function<std::function<int()>(CLI::App& sub)> setup;
  // Non-empty for a subcommand of another command (e.g. "bench" for `tessera bench offline`).
  std::string parent = {};
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace tessera::cli
