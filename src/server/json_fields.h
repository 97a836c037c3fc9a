// Typed access to optional request fields: absent and null both mean "not given"; a present value
// of the wrong type or outside its range is an ApiError 400 naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::server {

using OJson = nlohmann::ordered_json;

const OJson* field(const OJson& b, const char* key);
std::optional<bool> get_bool(const OJson& b, const char* key);
// Integers; 16.0 counts as 16 (JavaScript clients send numbers).
std::optional<int64_t> get_int(const OJson& b, const char* key, int64_t lo, int64_t hi);
std::optional<double> get_num(const OJson& b, const char* key, double lo, double hi);
std::optional<std::string> get_str(const OJson& b, const char* key);

// Members of nested objects (content blocks, input items), `where` being the object's path
// (messages[1].content[0]): a 400 names where.key.
// The string member `key` (non-empty when `non_empty`).
const std::string& required_string(const OJson& o, const char* key, const std::string& where, bool non_empty);
// The object's "type" string; `what` says what the object must be ("a content block object").
const std::string& type_member(const OJson& o, const std::string& where, const char* what);

}  // namespace tessera::server
