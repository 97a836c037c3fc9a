#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace tessera::server {

const OJson* field(const OJson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const OJson& b, const char* key) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(key, "'{}' must be a boolean", key);
  return v->get<bool>();
}

std::optional<int64_t> get_int(const OJson& b, const char* key, int64_t lo, int64_t hi) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, u);
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::abs(v->get<double>()) < 9e15 &&
             v->get<double>() == std::trunc(v->get<double>())) {
    // 16.0 is an integer to JavaScript clients. The range is checked before any conversion: a double
    // past int64's range (1e308) converted to int64 is undefined behaviour.
    x = static_cast<int64_t>(v->get<double>());
  } else {
    bad_request(key, "'{}' must be an integer", key);
  }
  if (x < lo || x > hi) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

std::optional<double> get_num(const OJson& b, const char* key, double lo, double hi) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(key, "'{}' must be a number", key);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

std::optional<std::string> get_str(const OJson& b, const char* key) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(key, "'{}' must be a string", key);
  return v->get<std::string>();
}

const std::string& required_string(const OJson& o, const char* key, const std::string& where, bool non_empty) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string() || (non_empty && it->get_ref<const std::string&>().empty()))
    bad_request(where + "." + key, "{}.{} must be a{} string", where, key, non_empty ? " non-empty" : "");
  return it->get_ref<const std::string&>();
}

const std::string& type_member(const OJson& o, const std::string& where, const char* what) {
  if (!o.is_object()) bad_request(where, "{} must be {}", where, what);
  auto it = o.find("type");
  if (it == o.end() || !it->is_string()) bad_request(where + ".type", "{}.type must be a string", where);
  return it->get_ref<const std::string&>();
}

}  // namespace tessera::server
