// Logging goes through spdlog; this sets the format and level once for the process.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace tessera::core {

// text: "2025-01-31 12:34:56.789 I message" for people; json: one JSON object per line
// (core/log_json.h) for log collectors.
enum class LogFormat { kText, kJson };

// "text" or "json"; throws core::Error naming the accepted values for anything else.
LogFormat parse_log_format(std::string_view name);

// level: trace, debug, info, warn, error, off. Logs go to stderr so stdout stays machine-readable.
void init_logging(std::string_view level = "info", LogFormat format = LogFormat::kText);

// The format init_logging set (kText before it ran).
LogFormat log_format();

}  // namespace tessera::core
