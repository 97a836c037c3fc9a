#include "io/json_file.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file.h"

namespace tessera::io {

using core::fail;

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = core::read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range: 1e999 overflows
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

const nlohmann::json& JsonFields::raw(const std::string& key) const {
  if (!has(key)) fail("{}: missing required field '{}'", where_, key);
  return obj_.at(key);
}

int64_t JsonFields::get_int(const std::string& key) const {
  const auto& v = raw(key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("{}: field '{}' is {}, too large for a 64-bit integer", where_, key, v.dump());
  if (v.is_number_integer()) return v.get<int64_t>();
  // 2.0 is accepted as 2; the range test comes first, as the cast of a double beyond int64 is undefined.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  fail("{}: field '{}' must be an integer, got {}", where_, key, v.dump());
}

int64_t JsonFields::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

std::optional<int64_t> JsonFields::get_optional_int(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}

double JsonFields::get_double(const std::string& key) const {
  const auto& v = raw(key);
  if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", where_, key, v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail("{}: field '{}' must be a finite number, got {}", where_, key, v.dump());
  return d;
}

double JsonFields::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

bool JsonFields::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = obj_.at(key);
  if (!v.is_boolean()) fail("{}: field '{}' must be true or false, got {}", where_, key, v.dump());
  return v.get<bool>();
}

std::string JsonFields::get_string(const std::string& key) const {
  const auto& v = raw(key);
  if (!v.is_string()) fail("{}: field '{}' must be a string, got {}", where_, key, v.dump());
  return v.get<std::string>();
}

std::string JsonFields::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

}  // namespace tessera::io
