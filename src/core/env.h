// Every TESSERA_* environment variable the program reads, declared once with its default and what it
// does (the vllm/envs.py pattern). Code reads a switch only through these functions, by a declared
// name; `tessera plan` prints the ones that are set, and a test fails on a getenv("TESSERA_...")
// anywhere else.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tessera::core {

struct EnvSwitch {
  const char* name;
  const char* default_value;  // "" = unset
  const char* doc;
};

// The table, in the order `tessera plan` and docs/CLI.md list it.
std::span<const EnvSwitch> env_switches();

// The environment's value of declared switch `name`, or none when it is unset or empty. Throws
// core::Error for a name that is not in the table (a programming error the tests catch).
std::optional<std::string> env_value(std::string_view name);
// An on/off switch whose default is on: off only when set to "0".
bool env_switch_on(std::string_view name);
// A strict on/off switch: "1" on, "0" off, unset or empty its default (the table's "1" or "0");
// any other value throws core::Error naming the variable.
bool env_flag(std::string_view name);
// A whole number from `lo` to `hi`: unset or empty, the table's default; anything else (not a
// number, out of range) throws core::Error naming the variable and the range.
int env_int(std::string_view name, int lo, int hi);

}  // namespace tessera::core
