#include "core/file.h"
#include "io/json_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::io {

using core::fail;

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = core::read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

const nlohmann::json& JsonFields::raw(const std::string& key) const {
  if (!has(key)) fail("{}: missing required field '{}'", where_, key);
  return obj_.at(key);
}

int64_t JsonFields::get_int(const std::string& key) const {
  const auto& v = raw(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
    return static_cast<int64_t>(v.get<double>());
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
  return v.get<double>();
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
