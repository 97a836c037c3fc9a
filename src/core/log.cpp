#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tessera::core {

void init_logging(std::string_view level) {
  auto logger = spdlog::get("tessera");
  if (!logger) logger = spdlog::stderr_color_mt("tessera");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace tessera::core
