#include "text/tokenizer/tiktoken_tokenizer.h"

#include <charconv>

#include "core/error.h"
#include "text/tokenizer/added_tokens.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/load_util.h"
#include "text/tokenizer/regex.h"
#include "text/tokenizer/utf8.h"

namespace tessera::text {

const std::string_view kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

namespace {

constexpr int kNumReservedSpecial = 256;

// Python's str.isspace (what Kimi's slicing uses): White_Space plus the separators U+001C..U+001F.
bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with padding (what tiktoken writes). False on malformed input.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(in[i + k]);
      if (c == '=') {
        if (i + 4 != in.size() || k < 2) return false;
        v[k] = 0;
        ++pad;
      } else {
        if (pad) return false;
        v[k] = base64_value(c);
        if (v[k] < 0) return false;
      }
    }
    const uint32_t x = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(x >> 16));
    if (pad < 2) out.push_back(static_cast<char>((x >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(x & 0xFF));
  }
  return true;
}

class TiktokenTokenizer : public Tokenizer {
 public:
  explicit TiktokenTokenizer(const std::filesystem::path& dir) : regex_(kKimiPattern, "Kimi tiktoken pattern") {
    load(dir);
  }

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const override {
    const size_t bad = utf8_valid_prefix(text);
    if (bad != text.size()) core::fail("cannot tokenize: input is not valid UTF-8 at byte {}", bad);
    std::vector<int32_t> ids;
    if (options.add_special_tokens && add_bos_ && bos_id_) ids.push_back(*bos_id_);
    std::vector<Segment> segments;
    for (std::string_view slice : kimi_slices(text)) {
      segments.clear();
      if (options.parse_special) {
        specials_.split(slice, /*skip_special=*/false, segments);
      } else if (!slice.empty()) {
        segments.push_back({slice, -1});
      }
      for (const Segment& seg : segments) {
        if (seg.id >= 0) {
          ids.push_back(seg.id);
          continue;
        }
        regex_.for_each_match(seg.text, [&](size_t b, size_t e) { bpe_.encode(seg.text.substr(b, e - b), ids); });
      }
    }
    if (options.add_special_tokens && add_eos_ && eos_id_) ids.push_back(*eos_id_);
    return ids;
  }

  std::string id_to_token(int32_t id) const override {
    if (!has_id(id)) unknown_id(id);
    if (id >= num_base_) return std::string(bytes_[id]);
    return byte_level_encode(bytes_[id]);
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (auto it = special_ids_.find(token); it != special_ids_.end()) return it->second;
    std::string bytes;
    if (!byte_level_decode(token, bytes)) return std::nullopt;
    if (auto it = ranks_.find(bytes); it != ranks_.end()) return it->second;
    return std::nullopt;
  }

  std::string_view kind() const override { return "tiktoken"; }

 private:
  void load(const std::filesystem::path& dir) {
    const std::filesystem::path model_path = dir / "tiktoken.model";
    const std::string file = model_path.string();
    const std::string content = read_file_or_fail(model_path);
    bpe_.byte_ids.fill(-1);
    std::string bytes;
    size_t line_no = 0;
    for (size_t pos = 0; pos < content.size();) {
      size_t eol = content.find('\n', pos);
      if (eol == std::string::npos) eol = content.size();
      std::string_view line(content.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;  // load_tiktoken_bpe skips empty lines
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
        core::fail("{}: line {}: expected '<base64 token> <rank>'", file, line_no);
      if (!base64_decode(line.substr(0, sp), bytes))
        core::fail("{}: line {}: bad base64 token '{}'", file, line_no, line.substr(0, sp));
      const std::string_view rank_str = line.substr(sp + 1);
      int64_t rank = -1;
      auto [ptr, ec] = std::from_chars(rank_str.data(), rank_str.data() + rank_str.size(), rank);
      if (ec != std::errc() || ptr != rank_str.data() + rank_str.size() || rank < 0 || rank > (1 << 30))
        core::fail("{}: line {}: bad rank '{}'", file, line_no, rank_str);
      const auto id = static_cast<int32_t>(rank);
      if (has_id(id)) core::fail("{}: line {}: rank {} appears twice", file, line_no, rank);
      if (!ranks_.emplace(bytes, id).second) core::fail("{}: line {}: token appears twice", file, line_no);
      if (bytes.size() == 1) bpe_.byte_ids[static_cast<unsigned char>(bytes[0])] = id;
      set_token(id, bytes, false);
    }
    if (ranks_.empty()) core::fail("{}: no tokens", file);
    num_base_ = static_cast<int32_t>(ranks_.size());
    if (vocab_size() != num_base_)
      core::fail("{}: ranks are not 0..{} (largest is {})", file, num_base_ - 1, vocab_size() - 1);
    for (int b = 0; b < 256; ++b)
      if (bpe_.byte_ids[b] < 0) core::fail("{}: single-byte token 0x{:02X} is missing", file, b);

    // Pair table: for every token and every split into two tokens, the pair merges into it with
    // the token's rank (see bpe.h).
    bpe_.pairs.reserve(ranks_.size() * 3);
    for (const auto& [tok, id] : ranks_) {
      const std::string_view t = tok;
      for (size_t k = 1; k < t.size(); ++k) {
        auto l = ranks_.find(t.substr(0, k));
        if (l == ranks_.end()) continue;
        auto r = ranks_.find(t.substr(k));
        if (r == ranks_.end()) continue;
        bpe_.pairs.insert(l->second, r->second, {id, id});
      }
    }
    bpe_.whole = &ranks_;
    bpe_.whole_piece_first = true;

    // Special tokens: 256 slots after the base vocabulary.
    const std::filesystem::path cfg_path = dir / "tokenizer_config.json";
    const TokenizerConfig cfg = read_tokenizer_config(cfg_path, /*required=*/true);
    std::vector<AddedToken> slots(kNumReservedSpecial);
    for (int i = 0; i < kNumReservedSpecial; ++i) {
      slots[i].id = num_base_ + i;
      slots[i].content = "<|reserved_token_" + std::to_string(num_base_ + i) + "|>";
      slots[i].special = true;
    }
    if (cfg.added_tokens_decoder.is_object()) {
      for (auto it = cfg.added_tokens_decoder.begin(); it != cfg.added_tokens_decoder.end(); ++it) {
        int64_t id = -1;
        auto [ptr, ec] = std::from_chars(it.key().data(), it.key().data() + it.key().size(), id);
        if (ec != std::errc() || ptr != it.key().data() + it.key().size())
          core::fail("{}: added_tokens_decoder key '{}' is not an integer id", cfg_path.string(), it.key());
        const auto& v = it.value();
        if (!v.is_object() || !v.contains("content") || !v["content"].is_string())
          core::fail("{}: added_tokens_decoder['{}'] needs a string 'content'", cfg_path.string(), it.key());
        // Kimi names only the slots in range; other entries are ignored (as the reference does).
        if (id < num_base_ || id >= num_base_ + kNumReservedSpecial) continue;
        AddedToken& slot = slots[id - num_base_];
        slot.content = v["content"];
        slot.special = v.contains("special") && v["special"].is_boolean() ? v["special"].get<bool>() : true;
        if (slot.content.empty())
          core::fail("{}: added_tokens_decoder['{}'] has empty content", cfg_path.string(), it.key());
      }
    }
    for (const AddedToken& t : slots) {
      set_token(t.id, t.content, t.special);
      special_ids_[t.content] = t.id;
      specials_.add(t);
    }
    apply_special_token_config(cfg, cfg_path);
  }

  Regex regex_;
  BpeModel bpe_;
  BytesToId ranks_;
  BytesToId special_ids_;
  AddedTokenMatcher specials_;
  int32_t num_base_ = 0;
};

}  // namespace

std::vector<std::string_view> kimi_slices(std::string_view text, size_t max_chunk_chars, size_t max_run_chars) {
  std::vector<std::string_view> out;
  // Fast path: a run longer than max_run_chars needs more bytes than that.
  if (text.size() <= max_run_chars && text.size() <= max_chunk_chars) {
    out.push_back(text);
    return out;
  }
  size_t pos = 0;
  do {
    // One chunk of at most max_chunk_chars code points.
    size_t chunk_end = pos;
    for (size_t n = 0; n < max_chunk_chars && chunk_end < text.size(); ++n) next_code_point(text, chunk_end);
    const std::string_view chunk = text.substr(pos, chunk_end - pos);
    // _split_whitespaces_or_nonwhitespaces(chunk, max_run_chars)
    size_t slice_start = 0, run_len = 0, i = 0;
    bool run_is_space = false;
    if (!chunk.empty()) {
      size_t q = 0;
      run_is_space = python_isspace(next_code_point(chunk, q));
    }
    while (i < chunk.size()) {
      const size_t at = i;
      const bool is_space = python_isspace(next_code_point(chunk, i));
      if (run_is_space != is_space) {
        run_len = 1;
        run_is_space = is_space;
      } else if (++run_len > max_run_chars) {
        out.push_back(chunk.substr(slice_start, at - slice_start));
        slice_start = at;
        run_len = 1;
      }
    }
    out.push_back(chunk.substr(slice_start));
    pos = chunk_end;
  } while (pos < text.size());
  return out;
}

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::filesystem::path& model_dir) {
  return std::make_unique<TiktokenTokenizer>(model_dir);
}

}  // namespace tessera::text
