// JSON-lines logging (`--log-format json`): one object per line, for log collectors (journald's
// JSON export, Loki, Elasticsearch, CloudWatch) that would otherwise have to parse free text.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>
#include <string_view>

namespace tessera::core {

// Appends `s` as a JSON string literal (quotes included): `"` `\` and control characters escaped,
// bytes that are not valid UTF-8 replaced by U+FFFD so that every line stays valid JSON whatever a
// message quotes (a client's text, a file name).
void append_json_string(std::string& out, std::string_view s);

// Formats a record as {"time":"2025-01-31T12:34:56.789Z","level":"info","logger":"tessera",
// "thread":1234,"message":"..."} and a newline; time is UTC with milliseconds (RFC 3339).
std::unique_ptr<spdlog::formatter> make_json_log_formatter();

}  // namespace tessera::core
