// Constrained decoding costs on the DeepSeek-V3 vocabulary (~129k tokens), single-threaded: one
// token mask (GrammarMatcher::fill_mask) at typical positions of a typical response_format schema,
// and the one-off costs (vocabulary index per tokenizer, per-state precomputation per schema).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "text/constrain/json_schema.h"
#include "text/constrain/token_matcher.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using namespace tessera::text;
using namespace tessera::text::constrain;

const Tokenizer& tokenizer() {
  static const auto t = [] {
    const std::filesystem::path root = tessera::core::env_value("TESSERA_FIXTURES").value_or(TESSERA_FIXTURES_DIR);
    return load_tokenizer(root / "tokenizers" / "deepseek-v3");
  }();
  return *t;
}

const std::shared_ptr<const VocabIndex>& vocab() {
  static const auto v = VocabIndex::build(tokenizer());
  return v;
}

const nlohmann::ordered_json& schema() {
  static const auto s = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "age": {"type": "integer"},
      "score": {"type": "number"},
      "level": {"enum": ["low", "medium", "high"]},
      "tags": {"type": "array", "items": {"type": "string"}},
      "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                  "required": ["city", "zip"], "additionalProperties": false},
      "active": {"type": "boolean"}
    },
    "required": ["name", "age", "score", "level", "tags", "address", "active"],
    "additionalProperties": false
  })");
  return s;
}

const std::shared_ptr<const TokenGrammar>& token_grammar() {
  static const auto g = TokenGrammar::build(CompiledGrammar::compile(json_schema_grammar(schema())), vocab());
  return g;
}

void BM_Mask(benchmark::State& state, const char* prefix) {
  GrammarMatcher m(token_grammar(), {tokenizer().eos_id().value()});
  if (!m.accept_text(prefix)) {
    state.SkipWithError("prefix refused");
    return;
  }
  std::vector<uint32_t> mask(mask_words(tokenizer().vocab_size()));
  for (auto _ : state) {
    m.fill_mask(mask);
    benchmark::DoNotOptimize(mask.data());
  }
}

BENCHMARK_CAPTURE(BM_Mask, start, "")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_key, R"({"na)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_string, R"({"name": "Jo)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, after_string, R"({"name": "Jo")")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, between_fields, R"({"name": "Jo", "age": 42, )")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_integer, R"({"name": "Jo", "age": 4)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_number, R"({"name": "Jo", "age": 42, "score": 3.1)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_enum, R"({"name": "Jo", "age": 42, "score": 3.1, "level": "me)")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, in_array, R"({"name": "Jo", "age": 42, "score": 3.1, "level": "low", "tags": ["a", )")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, nested_string,
                  R"({"name": "Jo", "age": 42, "score": 3.1, "level": "low", "tags": [], "address": {"city": "Pa)")
    ->Unit(benchmark::kMicrosecond);

void BM_AcceptToken(benchmark::State& state) {
  const auto ids = tokenizer().encode(
      R"({"name": "Jo Smith", "age": 42, "score": 3.25, "level": "low", "tags": ["a", "b"], "address": {"city": "Paris", "zip": "75001"}, "active": true})");
  for (auto _ : state) {
    GrammarMatcher m(token_grammar(), {});
    for (int32_t id : ids) benchmark::DoNotOptimize(m.accept_token(id));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
}
BENCHMARK(BM_AcceptToken)->Unit(benchmark::kMicrosecond);

void BM_VocabIndex(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(VocabIndex::build(tokenizer()));
}
BENCHMARK(BM_VocabIndex)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_CompileSchema(benchmark::State& state) {
  vocab();
  for (auto _ : state)
    benchmark::DoNotOptimize(TokenGrammar::build(CompiledGrammar::compile(json_schema_grammar(schema())), vocab()));
}
BENCHMARK(BM_CompileSchema)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
