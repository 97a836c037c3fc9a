#include "text/tokenizer/hf_tokenizer.h"

#include <unordered_map>

#include "core/error.h"
#include "text/tokenizer/added_tokens.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/hf_normalizer.h"
#include "text/tokenizer/hf_pre_tokenizer.h"
#include "text/tokenizer/load_util.h"
#include "text/tokenizer/utf8.h"

namespace tessera::text {
namespace {

// The ByteLevel decoder's rule for one token string: if every code point is in the byte-level
// alphabet, the bytes it stands for; otherwise the string's own UTF-8 bytes.
std::string decoded_bytes(const std::string& token) {
  std::string bytes;
  if (byte_level_decode(token, bytes)) return bytes;
  return token;
}

bool decoder_is_byte_level(const nlohmann::json& d) {
  if (!d.is_object() || !d.contains("type") || !d["type"].is_string()) return false;
  if (d["type"] == "ByteLevel") return true;
  if (d["type"] == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& s : d["decoders"])
      if (decoder_is_byte_level(s)) return true;
  }
  return false;
}

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(const std::filesystem::path& dir) { load(dir); }

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const override {
    const size_t bad = utf8_valid_prefix(text);
    if (bad != text.size()) core::fail("cannot tokenize: input is not valid UTF-8 at byte {}", bad);
    std::vector<int32_t> ids;
    if (options.add_special_tokens && add_bos_ && bos_id_) ids.push_back(*bos_id_);
    const bool skip_special = !options.parse_special;
    std::vector<Segment> raw_segments, norm_segments;
    std::vector<std::string_view> pieces;
    Arena arena;
    raw_matcher_.split(text, skip_special, raw_segments);
    for (const Segment& seg : raw_segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      std::string_view normalized = seg.text;
      if (normalizer_) {
        arena.push_back(normalizer_->normalize(seg.text));
        normalized = arena.back();
      }
      norm_segments.clear();
      norm_matcher_.split(normalized, skip_special, norm_segments);
      for (const Segment& s2 : norm_segments) {
        if (s2.id >= 0) {
          ids.push_back(s2.id);
          continue;
        }
        pieces.clear();
        pre_tokenize(pre_.get(), s2.text, arena, pieces);
        for (auto p : pieces) bpe_.encode(p, ids);
      }
    }
    if (options.add_special_tokens && add_eos_ && eos_id_) ids.push_back(*eos_id_);
    return ids;
  }

  std::string id_to_token(int32_t id) const override {
    if (!has_id(id)) unknown_id(id);
    return tokens_[id];
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = token_ids_.find(token);
    if (it == token_ids_.end()) return std::nullopt;
    return it->second;
  }

  std::string_view kind() const override { return "tokenizer.json"; }

 private:
  void load(const std::filesystem::path& dir) {
    const std::filesystem::path path = dir / "tokenizer.json";
    const std::string file = path.string();
    const nlohmann::json j = parse_json_file(path);
    try {
      load_json(j, file);
    } catch (const nlohmann::json::exception& e) {
      core::fail("{}: unexpected content: {}", file, e.what());
    }
    const TokenizerConfig cfg = read_tokenizer_config(dir / "tokenizer_config.json", /*required=*/false);
    apply_special_token_config(cfg, dir / "tokenizer_config.json");
  }

  void load_json(const nlohmann::json& j, const std::string& file) {
    if (!j.is_object()) core::fail("{}: expected a JSON object at the top level", file);
    auto model_it = j.find("model");
    if (model_it == j.end() || !model_it->is_object()) core::fail("{}: field 'model' missing or not an object", file);
    const nlohmann::json& model = *model_it;
    if (model.contains("type") && model["type"] != "BPE")
      core::fail("{}: model.type '{}' is not supported (only BPE)", file, model["type"].dump());
    if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>())
      core::fail("{}: model.byte_fallback=true is not supported (byte-level BPE only)", file);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
        core::fail("{}: model.{} '{}' is not supported", file, key, model[key].get<std::string>());
    }
    if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
      core::fail("{}: model.dropout is not supported at inference", file);
    const bool ignore_merges =
        model.contains("ignore_merges") && model["ignore_merges"].is_boolean() && model["ignore_merges"].get<bool>();

    // Vocabulary: strings in the byte-level alphabet, converted to bytes for BPE.
    auto vocab_it = model.find("vocab");
    if (vocab_it == model.end() || !vocab_it->is_object())
      core::fail("{}: field 'model.vocab' missing or not an object", file);
    bpe_.byte_ids.fill(-1);
    token_ids_.reserve(vocab_it->size() + 1024);
    std::string bytes;
    for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
      if (!it.value().is_number_integer()) core::fail("{}: model.vocab['{}'] is not an integer id", file, it.key());
      const int64_t id64 = it.value().get<int64_t>();
      if (id64 < 0 || id64 > (1 << 30))
        core::fail("{}: model.vocab['{}'] has out-of-range id {}", file, it.key(), id64);
      const auto id = static_cast<int32_t>(id64);
      const std::string& tok = it.key();
      if (byte_level_decode(tok, bytes)) {
        if (bytes.size() == 1) bpe_.byte_ids[static_cast<unsigned char>(bytes[0])] = id;
        whole_.emplace(bytes, id);
        set_token(id, bytes, false);
      } else {
        set_token(id, tok, false);  // not reachable by BPE; decodes to its own text
      }
      token_ids_[tok] = id;
      if (tokens_.size() <= static_cast<size_t>(id)) tokens_.resize(static_cast<size_t>(id) + 1);
      tokens_[id] = tok;
    }

    // Merges: "a b" strings or ["a", "b"] pairs; rank = index.
    auto merges_it = model.find("merges");
    if (merges_it == model.end() || !merges_it->is_array())
      core::fail("{}: field 'model.merges' missing or not an array", file);
    bpe_.pairs.reserve(merges_it->size());
    int32_t rank = 0;
    for (const auto& m : *merges_it) {
      std::string a, b;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          core::fail("{}: model.merges[{}] '{}' is not two tokens separated by one space", file, rank, s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0];
        b = m[1];
      } else {
        core::fail("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", file, rank);
      }
      auto ia = token_ids_.find(a), ib = token_ids_.find(b), im = token_ids_.find(a + b);
      if (ia == token_ids_.end() || ib == token_ids_.end())
        core::fail("{}: model.merges[{}] uses a token that is not in model.vocab ('{}' '{}')", file, rank, a, b);
      if (im == token_ids_.end())
        core::fail("{}: model.merges[{}]: merged token '{}' is not in model.vocab", file, rank, a + b);
      bpe_.pairs.insert(ia->second, ib->second, {rank, im->second});
      ++rank;
    }
    bpe_.whole = &whole_;
    bpe_.whole_piece_first = ignore_merges;

    // Added tokens override the vocabulary for decoding and are matched before BPE.
    if (auto at = j.find("added_tokens"); at != j.end() && !at->is_null()) {
      if (!at->is_array()) core::fail("{}: field 'added_tokens' must be an array", file);
      for (size_t i = 0; i < at->size(); ++i) {
        const auto& t = (*at)[i];
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
            !t["content"].is_string())
          core::fail("{}: added_tokens[{}] needs an integer 'id' and a string 'content'", file, i);
        AddedToken tok;
        tok.id = t["id"].get<int32_t>();
        if (tok.id < 0) core::fail("{}: added_tokens[{}] has a negative id", file, i);
        tok.content = t["content"];
        auto flag = [&](const char* k, bool def) {
          return t.contains(k) && t[k].is_boolean() ? t[k].get<bool>() : def;
        };
        tok.special = flag("special", false);
        tok.lstrip = flag("lstrip", false);
        tok.rstrip = flag("rstrip", false);
        tok.single_word = flag("single_word", false);
        tok.normalized = flag("normalized", !tok.special);
        set_token(tok.id, decoded_bytes(tok.content), tok.special);
        token_ids_[tok.content] = tok.id;
        if (tokens_.size() <= static_cast<size_t>(tok.id)) tokens_.resize(static_cast<size_t>(tok.id) + 1);
        tokens_[tok.id] = tok.content;
        (tok.normalized ? norm_matcher_ : raw_matcher_).add(tok);
      }
    }

    normalizer_ = make_normalizer(j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), file + ": normalizer");
    pre_ = make_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(),
                              file + ": pre_tokenizer");
    if (!pre_ || !pre_->has_byte_level())
      core::fail("{}: pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported", file);
    if (!j.contains("decoder") || !decoder_is_byte_level(j["decoder"]))
      core::fail("{}: decoder must be ByteLevel (only byte-level BPE tokenizers are supported)", file);
  }

  BpeModel bpe_;
  BytesToId whole_;
  BytesToId token_ids_;  // vocabulary string (and added-token content) -> id
  std::vector<std::string> tokens_;
  AddedTokenMatcher raw_matcher_, norm_matcher_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& model_dir) {
  return std::make_unique<HfTokenizer>(model_dir);
}

}  // namespace tessera::text
