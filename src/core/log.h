// Logging goes through spdlog; this sets the format and level once for the process.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace tessera::core {

// level: trace, debug, info, warn, error, off. Logs go to stderr so stdout stays machine-readable.
void init_logging(std::string_view level = "info");

}  // namespace tessera::core
