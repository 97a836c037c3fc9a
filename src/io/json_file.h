// Reading JSON config files with errors that name the file and the field.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tessera::io {

// Parses `path`; throws core::Error naming the file (and the parse position) when it is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Typed field access for config objects. `where` names the file and object path for messages,
// e.g. "config.json:text_config".
class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}
  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const nlohmann::json& raw(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  std::optional<int64_t> get_optional_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace tessera::io
