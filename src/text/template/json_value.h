// JSON in and out of the interpreter: request data (messages, tools, kwargs) becomes template
// values, and the `tojson` filter prints values exactly as Python's json.dumps does, because that
// text ends up in the prompt and a model was trained on json.dumps output.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "text/template/value.h"

namespace tessera::text::tpl {

// Objects keep their key order (ordered_json), as Python dicts from json.loads do.
Value from_json(const nlohmann::ordered_json& j, Heap& heap, int depth = 0);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // json.dumps(indent=...): None, or the per-level indent text
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // HF's tojson passes ensure_ascii=False
};

// json.dumps(v, ...). Throws TemplateError for values JSON cannot hold (Undefined, macros, ...).
std::string json_dumps(const Value& v, const JsonDumpOptions& opts, Heap* heap);
// Python json string encoding of one string, quotes included.
std::string json_quote(std::string_view s, bool ensure_ascii);

}  // namespace tessera::text::tpl
