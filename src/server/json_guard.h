// Parsing a request body as JSON without letting its shape hurt the server. Before nlohmann::json
// sees the body, one linear scan checks
// * nesting depth: nlohmann parses iteratively, but destroying, copying and dumping a value recurse,
//   so a body nested a million levels deep (in any field, ignored ones included) ended the process
//   with a stack overflow;
// * members per object: nlohmann::ordered_json looks for a duplicate key on every insert, so one
//   object of 120,000 keys took 44 s of CPU to parse (quadratic).
// Parse errors quote at most a short excerpt of the body around the error, never the body itself
// (nlohmann's own message repeats the whole token read so far: a 7 MB string came back as a 7 MB
// error).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace tessera::server {

struct JsonLimits {
  int max_depth = 64;
  int64_t max_object_members = 1024;
};

// Throws ApiError 400 naming the top-level field where the limit was crossed (param) and what the
// limit is; a syntax error names the byte offset with a short excerpt.
void check_json_shape(std::string_view body, const JsonLimits& limits);
nlohmann::ordered_json parse_request_json(std::string_view body, const JsonLimits& limits);

}  // namespace tessera::server
