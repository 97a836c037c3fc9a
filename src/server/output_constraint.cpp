#include "server/output_constraint.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"
#include "text/constrain/json_schema.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::server {
namespace {

using text::ReasoningState;
using text::constrain::Grammar;
using text::constrain::GrammarMatcher;
using text::constrain::TokenGrammar;

bool contains(const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); }

// The grammar's matcher behind the engine's interface, free while the model reasons.
class GatedMatcher final : public engine::TokenConstraint {
 public:
  GatedMatcher(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> stop_tokens,
               const text::ReasoningMarkers& reasoning, ReasoningState start)
      : matcher_(std::move(grammar), std::move(stop_tokens)), reasoning_(reasoning) {
    phase_ = !reasoning.valid() || start == ReasoningState::kContent ? Phase::kConstrained
             : start == ReasoningState::kReasoning                   ? Phase::kThinking
                                                                     : Phase::kMayThink;
  }

  bool active() const override { return phase_ != Phase::kThinking; }

  void fill_allowed(std::span<uint32_t> bitmask) override {
    matcher_.fill_mask(bitmask);
    const int32_t t = reasoning_.think_start;
    if (phase_ == Phase::kMayThink && static_cast<size_t>(t) / 32 < bitmask.size())
      bitmask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
  }

  bool advance(int32_t token) override {
    switch (phase_) {
      case Phase::kMayThink:
        if (token == reasoning_.think_start) {
          phase_ = Phase::kThinking;
          return true;
        }
        phase_ = Phase::kConstrained;
        return matcher_.accept_token(token);
      case Phase::kThinking:
        if (token == reasoning_.think_end) {
          phase_ = Phase::kConstrained;
        } else if (contains(reasoning_.implicit_end, token)) {  // Kimi: a tool section ends reasoning
          phase_ = Phase::kConstrained;
          return matcher_.accept_token(token);
        }
        return true;
      case Phase::kConstrained:
        return matcher_.accept_token(token);
    }
    return false;
  }

 private:
  enum class Phase { kMayThink, kThinking, kConstrained };
  GrammarMatcher matcher_;
  text::ReasoningMarkers reasoning_;
  Phase phase_;
};

class GatedMatcherFactory final : public engine::TokenConstraintFactory {
 public:
  GatedMatcherFactory(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> stop_tokens,
                      text::ReasoningMarkers reasoning, ReasoningState start)
      : grammar_(std::move(grammar)),
        stop_tokens_(std::move(stop_tokens)),
        reasoning_(std::move(reasoning)),
        start_(start) {}
  std::unique_ptr<engine::TokenConstraint> create() const override {
    return std::make_unique<GatedMatcher>(grammar_, stop_tokens_, reasoning_, start_);
  }

 private:
  std::shared_ptr<const TokenGrammar> grammar_;
  std::vector<int32_t> stop_tokens_;
  text::ReasoningMarkers reasoning_;
  ReasoningState start_;
};

// A tool's arguments: its `parameters` schema. A schema outside the supported subset (say a
// `minLength` from a zod schema) still gets well-formed JSON arguments (any object) rather than a
// refused request: the call stays usable, and the log says what was not enforced.
Grammar arguments_grammar(const nlohmann::ordered_json& function, size_t index) {
  const auto it = function.find("parameters");
  if (it == function.end() || it->is_null()) return text::constrain::json_object_grammar();
  try {
    return text::constrain::json_schema_grammar(*it, fmt::format("tools[{}].function.parameters", index));
  } catch (const core::Error& e) {
    spdlog::warn("tool_choice: the arguments of tool '{}' are constrained to any JSON object: {}",
                 function.value("name", ""), e.what());
    return text::constrain::json_object_grammar();
  }
}

}  // namespace

OutputConstraints::OutputConstraints(const text::Tokenizer& tokenizer, text::ToolCallMarkers tools,
                                     text::ReasoningMarkers reasoning)
    : tokenizer_(tokenizer), tools_(std::move(tools)), reasoning_(std::move(reasoning)) {
  auto add = [&](int32_t id) {
    if (id >= 0 && !contains(spelled_, id)) spelled_.push_back(id);
  };
  for (int32_t id : tools_.section_begin) add(id);
  for (int32_t id : tools_.section_end) add(id);
  for (int32_t id : {tools_.call_begin, tools_.call_end, tools_.argument_begin, tools_.sep}) add(id);
}

std::shared_ptr<const text::constrain::VocabIndex> OutputConstraints::vocab() {
  std::call_once(vocab_once_, [&] { vocab_ = text::constrain::VocabIndex::build(tokenizer_, spelled_); });
  return vocab_;
}

Grammar OutputConstraints::build_grammar(const OutputConstraintSpec& spec) const {
  using Answer = OutputConstraintSpec::Answer;
  using Tools = OutputConstraintSpec::Tools;
  Grammar g;
  const Grammar::Rule root = g.add_rule("root");
  std::vector<Grammar::Expr> alternatives;
  const bool must_call = spec.tools == Tools::kRequired || spec.tools == Tools::kNamed;
  if (spec.answer != Answer::kFree && !must_call) {
    try {
      alternatives.push_back(g.embed(spec.answer == Answer::kJsonObject
                                         ? text::constrain::json_object_grammar()
                                         : text::constrain::json_schema_grammar(spec.schema, spec.schema_path),
                                     "answer."));
    } catch (const core::Error& e) {
      bad_request("response_format", "{}", e.what());
    }
  }
  if (spec.tools != Tools::kNone && tools_.format != text::ToolCallFormat::kNone) {
    auto marker = [&](int32_t id) {
      const auto it = std::find(spelled_.begin(), spelled_.end(), id);
      return g.literal(text::constrain::special_token_spelling(static_cast<int>(it - spelled_.begin())));
    };
    auto any_marker = [&](const std::vector<int32_t>& ids) {
      std::vector<Grammar::Expr> alts;
      for (int32_t id : ids) alts.push_back(marker(id));
      return alts.size() == 1 ? alts[0] : g.choice(std::move(alts));
    };
    const bool kimi = tools_.format == text::ToolCallFormat::kKimiK2;
    std::vector<Grammar::Expr> per_tool;
    for (size_t i = 0; i < spec.tool_list.size(); ++i) {
      const auto& fn = spec.tool_list[i].at("function");
      const std::string name = fn.at("name").get<std::string>();
      if (spec.tools == Tools::kNamed && name != spec.named_tool) continue;
      const Grammar::Expr args = g.embed(arguments_grammar(fn, i), fmt::format("tool{}.", i));
      if (kimi)  // functions.NAME:IDX<|tool_call_argument_begin|>ARGS
        per_tool.push_back(g.seq({g.literal("functions." + name + ":"), g.repeat(g.bytes({{'0', '9'}}), 1, 4),
                                  marker(tools_.argument_begin), args}));
      else  // function<｜tool▁sep｜>NAME\n```json\nARGS\n```
        per_tool.push_back(g.seq({g.literal(name + "\n```json\n"), args, g.literal("\n```")}));
    }
    TESSERA_CHECK(!per_tool.empty(), "tool_choice: no tool to call");
    const Grammar::Expr body = per_tool.size() == 1 ? per_tool[0] : g.choice(std::move(per_tool));
    const Grammar::Expr call = kimi ? g.seq({marker(tools_.call_begin), body, marker(tools_.call_end)})
                                    : g.seq({marker(tools_.call_begin), g.literal("function"), marker(tools_.sep), body,
                                             marker(tools_.call_end)});
    // Several calls go one per line (DeepSeek's template says so); a named function is called once.
    const Grammar::Expr calls =
        spec.tools == Tools::kNamed ? call : g.seq({call, g.star(g.seq({g.optional(g.literal("\n")), call}))});
    alternatives.push_back(g.seq({any_marker(tools_.section_begin), calls, any_marker(tools_.section_end)}));
  }
  g.define(root, alternatives.size() == 1 ? alternatives[0] : g.choice(std::move(alternatives)));
  g.set_root(root);
  return g;
}

std::shared_ptr<const engine::TokenConstraintFactory> OutputConstraints::make(const OutputConstraintSpec& spec,
                                                                              ReasoningState start,
                                                                              std::vector<int32_t> stop_tokens) {
  if (!spec.constrains()) return nullptr;
  using Tools = OutputConstraintSpec::Tools;
  if ((spec.tools == Tools::kRequired || spec.tools == Tools::kNamed) && tools_.format == text::ToolCallFormat::kNone)
    bad_request("tool_choice",
                "'tool_choice' {} needs a model with a known tool-call syntax (DeepSeek-V3 or Kimi-K2); this model's "
                "vocabulary has neither",
                spec.tools == Tools::kRequired ? "required" : "naming a function");
  nlohmann::ordered_json key = {{"answer", static_cast<int>(spec.answer)}, {"tools", static_cast<int>(spec.tools)}};
  if (spec.answer == OutputConstraintSpec::Answer::kJsonSchema) key["schema"] = spec.schema;
  if (spec.tools != Tools::kNone) key["tool_list"] = spec.tool_list, key["named"] = spec.named_tool;
  auto vocab_index = vocab();
  std::shared_ptr<const TokenGrammar> grammar = cache_.get(key.dump(), [&] {
    const Grammar g = build_grammar(spec);
    try {
      return TokenGrammar::build(text::constrain::CompiledGrammar::compile(g), vocab_index);
    } catch (const core::Error& e) {
      bad_request(spec.answer != OutputConstraintSpec::Answer::kFree ? "response_format" : "tool_choice",
                  "the output constraint cannot be compiled: {}", e.what());
    }
  });
  std::sort(stop_tokens.begin(), stop_tokens.end());
  stop_tokens.erase(std::unique(stop_tokens.begin(), stop_tokens.end()), stop_tokens.end());
  return std::make_shared<GatedMatcherFactory>(std::move(grammar), std::move(stop_tokens), reasoning_, start);
}

}  // namespace tessera::server
