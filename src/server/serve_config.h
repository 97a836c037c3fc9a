// `tessera serve --config FILE`: a TOML subset of flat `key = value` lines (strings in "" or '',
// integers, floats, booleans; # comments; an optional [serve] table header), whose keys are the
// long flag names (`port = 8080`, `api-key = "..."`, `max_model_len` also accepted for
// `max-model-len`). Flags given on the command line override the file.
#pragma once

#include <map>
#include <string>

namespace tessera::server {

// key -> value text as a flag would receive it. Throws core::Error with the line number.
std::map<std::string, std::string> parse_serve_config(const std::string& text, const std::string& where);

}  // namespace tessera::server
