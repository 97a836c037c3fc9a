// Input: a JSON Schema, optionally followed by a NUL byte and "choice" bytes. A schema that parses
// as JSON must either compile (grammar, per-state token sets over a small synthetic vocabulary) or
// fail with core::Error; then a matcher follows the choices: each picks an allowed token from the
// mask (or tries a disallowed one, which must be refused), checking that the mask and accept_token
// agree. No crash, hang, sanitizer report or unbounded memory. Limits are small so that large
// schemas reach them within the per-input timeout.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "text/constrain/json_schema.h"
#include "text/constrain/token_matcher.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using namespace tessera::text;
using namespace tessera::text::constrain;

// Every single byte, a few JSON-ish multi-byte pieces, and one special (stop) token.
class FuzzVocab : public Tokenizer {
 public:
  FuzzVocab() {
    const char* pieces[] = {"{\"", "\":", "\",",   "\"}",      " \"",      "\n  ", "true", "false", "null",   "12",
                            "0.",  "e+",  "\\u00", "\xC3\xA9", "\xE4\xBD", "]}",   "},",   "[{",    "\": \"", "abc"};
    int32_t id = 0;
    for (int b = 0; b < 256; ++b) set_token(id++, std::string(1, static_cast<char>(b)), false);
    for (const char* p : pieces) set_token(id++, p, false);
    set_token(id, "<eos>", true);
    eos_id_ = id;
  }
  std::vector<int32_t> encode(std::string_view, const EncodeOptions&) const override { return {}; }
  std::string id_to_token(int32_t id) const override { return std::string(token_bytes(id)); }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string_view kind() const override { return "fuzz"; }
};

const std::shared_ptr<const VocabIndex>& vocab() {
  static const FuzzVocab tok;
  static const auto v = VocabIndex::build(tok);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view schema_text = input.substr(0, nul);
  const std::string_view choices = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  SchemaLimits limits;
  limits.max_nodes = 2000;
  limits.max_grammar_exprs = 50000;
  GrammarLimits glimits;
  glimits.max_states = 20000;
  std::shared_ptr<const TokenGrammar> tg;
  try {
    tg = TokenGrammar::build(CompiledGrammar::compile(json_schema_grammar(schema, "schema", limits), glimits), vocab());
  } catch (const tessera::core::Error&) {
    return 0;
  }
  const int32_t eos = 256 + 20;
  GrammarMatcher m(tg, {eos});
  std::vector<uint32_t> mask(mask_words(eos + 1));
  for (size_t i = 0; i < choices.size() && i < 64 && !m.is_terminated(); ++i) {
    m.fill_mask(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id <= eos; ++id)
      if ((mask[id >> 5] >> (id & 31)) & 1u) allowed.push_back(id);
    const auto c = static_cast<uint8_t>(choices[i]);
    if (c & 0x80) {  // try any token: accepted exactly when the mask allows it
      const int32_t id = c & 0x7F ? (c & 0x7F) * 2 : eos;
      const bool ok = m.accept_token(id);
      const bool in_mask = (mask[id >> 5] >> (id & 31)) & 1u;
      if (ok != in_mask) std::abort();
      continue;
    }
    if (allowed.empty()) break;  // the schema's language is exhausted (cannot happen mid-value)
    if (!m.accept_token(allowed[c % allowed.size()])) std::abort();
    if (c == 0x7F && m.num_accepted() > 0) m.rollback(1);
  }
  return 0;
}
