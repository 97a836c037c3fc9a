// Token-level matching with the real DeepSeek-V3 vocabulary: random walks over the mask end in JSON
// that an independent validator (below, not the schema compiler) accepts; the mask allows exactly
// the tokens accept_token takes; tokenized valid texts are accepted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/test_support.h"
#include "text/constrain/grammar_cache.h"
#include "text/constrain/json_schema.h"
#include "text/constrain/token_matcher.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::text::constrain {
namespace {

using OJson = nlohmann::ordered_json;

struct Env {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const VocabIndex> vocab;
  int32_t eos = -1;
};

const Env& env() {
  static const Env e = [] {
    Env x;
    x.tok = load_tokenizer(test::fixtures_dir() / "tokenizers" / "deepseek-v3");
    x.vocab = VocabIndex::build(*x.tok);
    x.eos = x.tok->eos_id().value();
    return x;
  }();
  return e;
}

std::shared_ptr<const TokenGrammar> token_grammar(const OJson& schema) {
  return TokenGrammar::build(CompiledGrammar::compile(json_schema_grammar(schema)), env().vocab);
}

// Independent validator for the keywords the test schemas use.
bool valid(const OJson& v, const OJson& s, const OJson& root) {
  if (s.contains("$ref")) {
    const auto r = s["$ref"].get<std::string>();
    return valid(v, root.at(OJson::json_pointer(r.substr(1))), root);
  }
  if (s.contains("anyOf")) {
    for (const auto& alt : s["anyOf"])
      if (valid(v, alt, root)) return true;
    return false;
  }
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (e == v) return true;
    return false;
  }
  if (!s.contains("type")) return true;
  const auto t = s["type"].get<std::string>();
  if (t == "string") return v.is_string();
  if (t == "integer") {
    if (!v.is_number_integer()) return false;
    const auto x = v.get<int64_t>();
    if (s.contains("minimum") && x < s["minimum"].get<int64_t>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<int64_t>()) return false;
    return true;
  }
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const auto& item : v)
      if (s.contains("items") && !valid(item, s["items"], root)) return false;
    return true;
  }
  if (t == "object") {
    if (!v.is_object()) return false;
    const auto& props = s["properties"];
    for (const auto& r : s.value("required", OJson::array()))
      if (!v.contains(r.get<std::string>())) return false;
    // Keys in the schema's order, each a known property.
    size_t last = 0;
    for (const auto& [k, x] : v.items()) {
      if (!props.contains(k)) return false;
      size_t pos = 0;
      for (const auto& [pk, ps] : props.items()) {
        if (pk == k) break;
        ++pos;
      }
      if (pos < last) return false;
      last = pos;
      if (!valid(x, props[k], root)) return false;
    }
    return true;
  }
  return false;
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "score": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "level": {"enum": ["low", "mid", "high"]}, "ok": {"type": "boolean"}},
       "required": ["name", "age", "score", "tags", "level", "ok"]})",
    R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "b": {"type": "string"}, "c": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}},
       "required": ["c"]})",
    R"({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 2}}, "required": ["v", "kids"]}},
       "$ref": "#/$defs/n"})",
    R"({"type": "object", "properties": {"month": {"type": "integer", "minimum": 1, "maximum": 12},
        "temp": {"type": "integer", "minimum": -40, "maximum": 50}, "year": {"type": "integer", "minimum": 1900,
        "maximum": 2100}}, "required": ["month", "temp", "year"]})",
};

bool allowed(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; }

TEST(TokenMatcher, RandomWalksProduceValidJson) {
  const auto& e = env();
  std::mt19937 rng(1234);
  for (const char* text : kSchemas) {
    const auto schema = OJson::parse(text);
    const auto tg = token_grammar(schema);
    int finished = 0;
    for (int walk = 0; walk < 12; ++walk) {
      GrammarMatcher m(tg, {e.eos});
      std::vector<uint32_t> mask(mask_words(e.tok->vocab_size()));
      std::vector<int32_t> ids;
      bool done = false;
      for (int step = 0; step < 400 && !done; ++step) {
        m.fill_mask(mask);
        std::vector<int32_t> choices;
        for (int32_t id = 0; id < e.tok->vocab_size(); ++id)
          if (allowed(mask, id)) choices.push_back(id);
        ASSERT_FALSE(choices.empty()) << "dead end after: " << e.tok->decode(ids);
        for (int32_t id : choices) ASSERT_FALSE(e.tok->is_special(id) && id != e.eos) << id;
        // Prefer the stop token when it is allowed half the time, so that walks end.
        int32_t pick = choices[rng() % choices.size()];
        if (allowed(mask, e.eos) && rng() % 2 == 0) pick = e.eos;
        // Inside long strings, pick tokens with a quote more often so that walks end.
        if (step > 40 && rng() % 3 == 0) {
          std::vector<int32_t> closing;
          for (int32_t id : choices)
            if (id != e.eos && e.vocab->bytes(id).find_first_of("\"]}") != std::string_view::npos)
              closing.push_back(id);
          if (!closing.empty()) pick = closing[rng() % closing.size()];
        }
        ASSERT_TRUE(m.accept_token(pick)) << pick;
        if (pick == e.eos) {
          done = true;
        } else {
          ids.push_back(pick);
        }
      }
      if (!done) continue;
      ++finished;
      EXPECT_TRUE(m.is_terminated());
      const std::string out = e.tok->decode(ids);
      OJson v;
      ASSERT_NO_THROW(v = OJson::parse(out)) << out;
      EXPECT_TRUE(valid(v, schema, schema)) << out;
    }
    EXPECT_GE(finished, 6) << text;
  }
}

TEST(TokenMatcher, MaskAgreesWithAcceptToken) {
  const auto& e = env();
  const auto schema = OJson::parse(kSchemas[0]);
  const auto tg = token_grammar(schema);
  // States: start, inside a key, inside a string value, inside a number, between fields, in an array.
  const std::vector<std::string> prefixes = {
      "",
      R"({"na)",
      R"({"name": "Jo)",
      R"({"name": "Jo", "age": 4)",
      R"({"name": "Jo", "age": 42)",
      R"({"name": "Jo", "age": 42, "score": 1.)",
      R"({"name": "Jo", "age": 42, "score": 1.5, "tags": [)",
      R"({"name": "Jo", "age": 42, "score": 1.5, "tags": ["x"], "level": "hi)",
      R"({"name":"Jo","age":42,"score":1.5,"tags":[],"level":"high","ok":true})"};
  std::mt19937 rng(99);
  for (const auto& prefix : prefixes) {
    GrammarMatcher m(tg, {e.eos});
    ASSERT_TRUE(m.accept_text(prefix)) << prefix;
    std::vector<uint32_t> mask(mask_words(e.tok->vocab_size()));
    m.fill_mask(mask);
    std::vector<int32_t> sample;
    for (int i = 0; i < 3000; ++i) sample.push_back(static_cast<int32_t>(rng() % e.tok->vocab_size()));
    for (int32_t id = 0; id < e.tok->vocab_size(); ++id)  // every allowed token, and tokens with quotes
      if (allowed(mask, id) || e.vocab->bytes(id).find('"') != std::string_view::npos) sample.push_back(id);
    sample.push_back(e.eos);
    size_t n_allowed = 0;
    for (int32_t id : sample) {
      const bool ok = m.accept_token(id);
      if (ok) m.rollback(1);
      ASSERT_EQ(allowed(mask, id), ok) << "prefix " << prefix << " token " << id << " '" << e.vocab->bytes(id) << "'";
      n_allowed += ok;
    }
    EXPECT_GT(n_allowed, 0u) << prefix;
  }
}

// The same check on the any-JSON-object grammar (deeply recursive, every value type) and on the
// recursive schema, at states reached by hand-written prefixes.
TEST(TokenMatcher, MaskAgreesWithAcceptTokenRecursive) {
  const auto& e = env();
  const auto object = TokenGrammar::build(CompiledGrammar::compile(json_object_grammar()), e.vocab);
  const auto tree = token_grammar(OJson::parse(kSchemas[2]));
  const std::vector<std::pair<std::shared_ptr<const TokenGrammar>, std::string>> cases = {
      {object, R"({"a": [1, {"b": [[)"},
      {object, R"({"a": [1, {"b": tr)"},
      {object, R"({"a": -0.5e)"},
      {object, R"({"a": {"b": "c\u00)"},
      {object, "{\"a\": {}\n"},
      {object, R"({"a": [1, {"b": []}]})"},
      {tree, R"({"v": 1, "kids": [{"v": 2, "kids": [)"},
      {tree, R"({"v": 1, "kids": [{"v": 2, "kids": []})"},
  };
  std::mt19937 rng(5);
  for (const auto& [tg, prefix] : cases) {
    GrammarMatcher m(tg, {e.eos});
    ASSERT_TRUE(m.accept_text(prefix)) << prefix;
    std::vector<uint32_t> mask(mask_words(e.tok->vocab_size()));
    m.fill_mask(mask);
    std::vector<int32_t> sample;
    for (int i = 0; i < 2000; ++i) sample.push_back(static_cast<int32_t>(rng() % e.tok->vocab_size()));
    for (int32_t id = 0; id < e.tok->vocab_size(); ++id) {
      const auto b = e.vocab->bytes(id);
      if (allowed(mask, id) || b.find_first_of("\"]}") != std::string_view::npos) sample.push_back(id);
    }
    sample.push_back(e.eos);
    for (int32_t id : sample) {
      const bool ok = m.accept_token(id);
      if (ok) m.rollback(1);
      ASSERT_EQ(allowed(mask, id), ok) << "prefix " << prefix << " token " << id << " '" << e.vocab->bytes(id) << "'";
    }
  }
}

TEST(TokenMatcher, HandWrittenMasks) {
  const auto& e = env();
  const auto tg = token_grammar(OJson::parse(kSchemas[0]));
  GrammarMatcher m(tg, {e.eos});
  std::vector<uint32_t> mask(mask_words(e.tok->vocab_size()));
  const auto id = [&](const char* s) { return e.tok->encode(s).at(0); };
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(mask, id("{")));
  EXPECT_TRUE(allowed(mask, id("{\"")));
  EXPECT_FALSE(allowed(mask, id("[")));
  EXPECT_FALSE(allowed(mask, id(" {")));
  EXPECT_FALSE(allowed(mask, e.eos));
  ASSERT_TRUE(m.accept_text(R"({"name":"Jo","age":4)"));
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(mask, id("2")));
  EXPECT_TRUE(allowed(mask, id(",")));
  EXPECT_FALSE(allowed(mask, id("}")));  // score, tags, ... are required
  EXPECT_FALSE(allowed(mask, id(".")));  // integer
  EXPECT_FALSE(allowed(mask, e.eos));
  EXPECT_FALSE(m.accept_token(id("}")));
  EXPECT_TRUE(m.accept_token(id("2")));
}

TEST(TokenMatcher, RollbackRestoresMasks) {
  const auto& e = env();
  const auto tg = token_grammar(OJson::parse(kSchemas[0]));
  GrammarMatcher m(tg, {e.eos});
  const size_t words = mask_words(e.tok->vocab_size());
  // A span longer than the vocabulary (a model whose logits row is padded): the extra words are 0.
  std::vector<uint32_t> before(words + 8, 0xFFFFFFFFu), after(words + 8, 0xFFFFFFFFu);
  const auto ids = e.tok->encode(R"({"name": "Jo", "age": 7)");
  ASSERT_GE(ids.size(), 4u);
  for (size_t i = 0; i + 3 < ids.size(); ++i) ASSERT_TRUE(m.accept_token(ids[i]));
  m.fill_mask(before);
  for (size_t w = words; w < before.size(); ++w) EXPECT_EQ(before[w], 0u);
  for (size_t i = ids.size() - 3; i < ids.size(); ++i) ASSERT_TRUE(m.accept_token(ids[i]));
  EXPECT_EQ(m.num_accepted(), ids.size());
  m.rollback(3);
  EXPECT_EQ(m.num_accepted(), ids.size() - 3);
  m.fill_mask(after);
  EXPECT_EQ(before, after);
  EXPECT_THROW(m.rollback(ids.size()), core::Error);
  std::vector<uint32_t> too_small(words - 1);
  EXPECT_THROW(m.fill_mask(too_small), core::Error);
}

TEST(GrammarCache, LeastRecentlyUsedEviction) {
  const auto tg = token_grammar(OJson::parse(R"({"type": "boolean"})"));
  GrammarCache cache(2);
  int builds = 0;
  auto build = [&] {
    ++builds;
    return tg;
  };
  EXPECT_EQ(cache.get("a", build), tg);
  EXPECT_EQ(cache.get("a", build), tg);
  EXPECT_EQ(builds, 1);
  cache.get("b", build);
  cache.get("c", build);  // evicts "a", the least recently used
  EXPECT_EQ(builds, 3);
  EXPECT_EQ(cache.size(), 2u);
  cache.get("c", build);
  cache.get("b", build);
  EXPECT_EQ(builds, 3);
  cache.get("a", build);
  EXPECT_EQ(builds, 4);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 4u);
  EXPECT_THROW(cache.get("bad", [&]() -> std::shared_ptr<const TokenGrammar> { core::fail("schema: bad"); }),
               core::Error);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(TokenMatcher, EncodedValidTextsAreAccepted) {
  const auto& e = env();
  const auto tg = token_grammar(OJson::parse(kSchemas[0]));
  for (const std::string text :
       {R"({"name": "Zoë \"Z\" 北京", "age": -3, "score": 2.5e-3, "tags": ["a", "b"], "level": "mid", "ok": false})",
        "{\n  \"name\": \"x\",\n  \"age\": 0,\n  \"score\": 0,\n  \"tags\": [],\n  \"level\": \"low\",\n  \"ok\": "
        "true\n}"}) {
    GrammarMatcher m(tg, {e.eos});
    for (int32_t id : e.tok->encode(text)) ASSERT_TRUE(m.accept_token(id)) << text << " at token " << id;
    EXPECT_TRUE(m.is_complete());
    EXPECT_TRUE(m.accept_token(e.eos));
    EXPECT_TRUE(m.is_terminated());
    std::vector<uint32_t> mask(mask_words(e.tok->vocab_size()));
    m.fill_mask(mask);
    for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  }
  // An invalid text is refused at some token.
  GrammarMatcher m(tg, {e.eos});
  bool refused = false;
  for (int32_t id : e.tok->encode(R"({"name": "x", "age": "3"})")) refused = refused || !m.accept_token(id);
  EXPECT_TRUE(refused);
}

}  // namespace
}  // namespace tessera::text::constrain
