#include "server/json_guard.h"

#include <fmt/format.h>

#include <vector>

#include "server/api_error.h"
#include "server/http_wire.h"

namespace tessera::server {

void check_json_shape(std::string_view body, const JsonLimits& limits) {
  // One frame per open container: whether it is an object, and its members so far.
  struct Frame {
    bool object;
    int64_t members;
  };
  std::vector<Frame> stack;
  std::string top_key;  // the top-level member being read (the error's param)
  bool in_string = false, escape = false, expect_key = false, capture = false;
  size_t key_start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        if (capture) top_key = excerpt(body.substr(key_start, i - key_start), 64), capture = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        capture = expect_key && stack.size() == 1;
        key_start = i + 1;
        break;
      case '{':
      case '[':
        if (static_cast<int>(stack.size()) >= limits.max_depth)
          bad_request(top_key, "the JSON body nests deeper than {} levels (at byte {}{})", limits.max_depth, i,
                      top_key.empty() ? std::string() : ", in '" + top_key + "'");
        stack.push_back({c == '{', 0});
        expect_key = c == '{';
        break;
      case '}':
      case ']':
        if (!stack.empty()) stack.pop_back();
        expect_key = false;
        break;
      case ',':
        expect_key = !stack.empty() && stack.back().object;
        break;
      case ':':
        expect_key = false;
        if (!stack.empty() && stack.back().object && ++stack.back().members > limits.max_object_members)
          bad_request(top_key, "a JSON object in the body has more than {} members (at byte {}{})",
                      limits.max_object_members, i, top_key.empty() ? std::string() : ", in '" + top_key + "'");
        break;
      default:
        break;
    }
  }
}

nlohmann::ordered_json parse_request_json(std::string_view body, const JsonLimits& limits) {
  check_json_shape(body, limits);
  try {
    return nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 9:
    // syntax error while parsing value - invalid literal; last read: '<the token so far>'". Keep
    // the description, drop the echo, and quote a few bytes around the offset instead.
    std::string what = e.what();
    if (const size_t p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
    if (const size_t p = what.find("; last read"); p != std::string::npos) what.resize(p);
    const size_t at = e.byte > 0 ? std::min(e.byte - 1, body.size()) : 0;
    const size_t from = at > 20 ? at - 20 : 0;
    bad_request("", "the body is not valid JSON: {} at byte {} (near '{}')", excerpt(what, 160), at,
                excerpt(body.substr(from, at - from + 20), 40));
  } catch (const nlohmann::json::exception& e) {
    bad_request("", "the body is not valid JSON: {}", excerpt(e.what(), 160));
  }
}

}  // namespace tessera::server
