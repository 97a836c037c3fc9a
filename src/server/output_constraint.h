// Constrained decoding in the server: `response_format` json_object / json_schema and
// `tool_choice` required / named become one grammar over the model's vocabulary, run by
// text/constrain's GrammarMatcher behind the engine's TokenConstraint.
//
//  - The answer: JSON (any object, or a JSON Schema), written right after the reasoning.
//  - Tool calls in the model's own syntax (DeepSeek-V3 or Kimi-K2): the marker tokens are special
//    tokens, spelled in the grammar with special_token_spelling (bytes no text holds), each tool's
//    arguments are its `parameters` schema. `required`: one or more calls of any tool; a named
//    function: exactly one call of it; `auto` next to a response_format: a call or the JSON answer.
//  - Reasoning is free: the constraint starts after </think> (or at the first token when the model
//    may open <think> itself and does not; Kimi's tool section also ends reasoning).
// The grammar is complete only when the answer or the calls are; then the stop tokens (EOS) are
// allowed, and nothing else.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "text/constrain/grammar_cache.h"
#include "text/constrain/token_matcher.h"
#include "text/reasoning/reasoning_parser.h"
#include "text/reasoning/tool_call_parser.h"

namespace tessera::text {
class Tokenizer;
}

namespace tessera::server {

// What a request asks to constrain.
struct OutputConstraintSpec {
  enum class Answer { kFree, kJsonObject, kJsonSchema };
  enum class Tools { kNone, kAuto, kRequired, kNamed };
  Answer answer = Answer::kFree;
  nlohmann::ordered_json schema;  // kJsonSchema
  std::string schema_path;        // how errors name the schema, e.g. "response_format.json_schema.schema"
  Tools tools = Tools::kNone;
  nlohmann::ordered_json tool_list;  // the request's `tools` (validated)
  std::string named_tool;            // kNamed

  bool constrains() const { return answer != Answer::kFree || tools == Tools::kRequired || tools == Tools::kNamed; }
};

// The model's side, shared by every request: the vocabulary index (built on first use, ~65 ms on
// DeepSeek-V3's vocabulary) and a cache of compiled grammars by request shape.
class OutputConstraints {
 public:
  OutputConstraints(const text::Tokenizer& tokenizer, text::ToolCallMarkers tools, text::ReasoningMarkers reasoning);

  // The constraint for one request, or nullptr when `spec` constrains nothing. `start`: where the
  // generation starts (reasoning or not); `stop_tokens`: the ids that may end a complete output.
  // Throws ApiError 400 naming the field for a schema it cannot compile, or tool_choice on a model
  // without a known tool-call syntax.
  std::shared_ptr<const engine::TokenConstraintFactory> make(const OutputConstraintSpec& spec,
                                                             text::ReasoningState start,
                                                             std::vector<int32_t> stop_tokens);

  size_t cached_grammars() const { return cache_.size(); }

 private:
  std::shared_ptr<const text::constrain::VocabIndex> vocab();
  text::constrain::Grammar build_grammar(const OutputConstraintSpec& spec) const;

  const text::Tokenizer& tokenizer_;
  text::ToolCallMarkers tools_;
  text::ReasoningMarkers reasoning_;
  std::vector<int32_t> spelled_;  // marker ids, in special_token_spelling order
  std::once_flag vocab_once_;
  std::shared_ptr<const text::constrain::VocabIndex> vocab_;
  text::constrain::GrammarCache cache_{64};
};

}  // namespace tessera::server
