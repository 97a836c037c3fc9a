#include <cstdio>

#include "cli/command.h"

namespace tessera::cli {
namespace {
CommandRegistration reg{{"version", "print the tessera version", [](CLI::App&) {
                           return [] {
                             std::printf("tessera 0.1.0\n");
                             return 0;
                           };
                         }}};
}  // namespace
}  // namespace tessera::cli
