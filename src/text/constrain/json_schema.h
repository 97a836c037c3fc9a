// JSON Schema -> Grammar, for OpenAI `response_format` json_schema / json_object (and tool-call
// arguments later). The supported subset is what OpenAI strict mode and pydantic emit; anything
// else is refused with a core::Error naming the keyword and the JSON pointer of the schema node,
// which the server reports as HTTP 400. docs/CONSTRAINED_DECODING.md lists the subset and the
// whitespace rule.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <string>

#include "text/constrain/grammar.h"

namespace tessera::text::constrain {

// Bounds so that a hostile schema cannot use unbounded memory or time.
struct SchemaLimits {
  size_t max_depth = 64;              // nesting of schema nodes (through properties/items/anyOf...)
  size_t max_nodes = 20000;           // schema nodes compiled (a $ref target counts once)
  uint32_t max_repeat = 1000;         // minItems / maxItems above this are refused
  size_t max_grammar_exprs = 500000;  // size of the grammar built
};

// `path` is how error messages name the schema's root, e.g. "response_format.json_schema.schema";
// sub-nodes are appended as a JSON pointer ("<path>/properties/age").
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const std::string& path = "schema",
                            const SchemaLimits& limits = {});

// Any JSON object (response_format {"type": "json_object"}).
Grammar json_object_grammar();

// Any JSON value.
Grammar json_value_grammar();

}  // namespace tessera::text::constrain
