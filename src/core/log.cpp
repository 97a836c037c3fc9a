#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>

#include "core/error.h"
#include "core/log_json.h"

namespace tessera::core {
namespace {
std::atomic<LogFormat> g_format{LogFormat::kText};
}  // namespace

LogFormat parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  fail("--log-format must be text or json, got '{}'", name);
}

void init_logging(std::string_view level, LogFormat format) {
  auto logger = spdlog::get("tessera");
  if (!logger) logger = spdlog::stderr_color_mt("tessera");
  spdlog::set_default_logger(logger);
  if (format == LogFormat::kJson) {
    // No colour codes inside JSON: a collector would keep them as part of the level.
    spdlog::set_formatter(make_json_log_formatter());
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  g_format = format;
}

LogFormat log_format() { return g_format.load(); }

}  // namespace tessera::core
