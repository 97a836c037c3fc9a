// `tessera bench`: the parent of the benchmark subcommands (offline, kernels, ...), each of which
// registers itself with parent "bench".
#include "cli/command.h"

namespace tessera::cli {
namespace {
CommandRegistration reg{{"bench", "benchmarks: engine throughput (offline), GPU kernels (kernels)", [](CLI::App& app) {
                           app.require_subcommand(1);
                           return [] { return 0; };  // a subcommand always runs instead
                         }}};
}  // namespace
}  // namespace tessera::cli
