// Validation and normalization of a chat request's `messages` and `tools` before rendering: text
// parts joined into strings (the DeepSeek templates concatenate content), tool-call arguments as
// JSON strings, `reasoning` accepted for `reasoning_content`. Problems are ApiError 400 with the
// path of the field (messages[1].tool_calls[0].function.arguments).
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace tessera::server {

nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages);
// The request's `tools` (null when absent or empty); fills `names` with the function names.
nlohmann::ordered_json validate_tools(const nlohmann::ordered_json& body, std::set<std::string>& names);

}  // namespace tessera::server
