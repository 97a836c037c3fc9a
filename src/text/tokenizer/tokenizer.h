// Tokenizers of the models tessera serves: HF `tokenizer.json` byte-level BPE (DeepSeek-V3/R1 and
// tiktoken-style vocabularies exported to tokenizer.json) and tiktoken (`tiktoken.model` +
// `tokenizer_config.json`, Kimi-K2 family). `load_tokenizer(dir)` picks the kind from the files.
//
// Every token id maps to the bytes it contributes to decoded text; decoding concatenates those
// bytes and replaces invalid UTF-8 with U+FFFD (what both reference decoders do).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

struct EncodeOptions {
  // Add BOS/EOS as tokenizer_config.json asks (add_bos_token / add_eos_token). Off by default: the
  // chat templates emit BOS themselves.
  bool add_special_tokens = false;
  // Special-token strings inside the text become their special tokens (what the reference
  // tokenizers do). When false they are encoded as plain text (HF split_special_tokens=True /
  // tiktoken disallowed_special=()). Non-special added tokens of tokenizer.json still match.
  bool parse_special = true;
};

struct TokenizerConfig;  // load_util.h

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `text` must be valid UTF-8 (throws core::Error otherwise).
  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const = 0;
  // Throws core::Error for an id that is not in the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // One past the largest id (ids below it may still be unused: see has_id).
  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  bool has_id(int32_t id) const { return id >= 0 && id < vocab_size() && (flags_[id] & kExists); }
  bool is_special(int32_t id) const { return has_id(id) && (flags_[id] & kSpecial); }
  // Bytes the token adds to decoded text (special tokens: their content). Throws for unknown ids.
  std::string_view token_bytes(int32_t id) const;
  // Vocabulary string of a token (byte-level alphabet for ordinary tokens, content for special
  // and added tokens), as HF `convert_ids_to_tokens` / Kimi `get_vocab` show it.
  virtual std::string id_to_token(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // "tokenizer.json" or "tiktoken".
  virtual std::string_view kind() const = 0;

 protected:
  static constexpr uint8_t kExists = 1, kSpecial = 2;
  // Called by loaders: registers the decode bytes and flags of an id.
  void set_token(int32_t id, std::string bytes, bool special);
  [[noreturn]] void unknown_id(int32_t id) const;
  // Takes BOS/EOS strings and add_bos/add_eos from tokenizer_config.json (at `config_path`); a
  // BOS/EOS string that is not a token of this vocabulary is an error naming the file and field.
  void apply_special_token_config(const TokenizerConfig& cfg, const std::filesystem::path& config_path);
  std::vector<std::string> bytes_;
  std::vector<uint8_t> flags_;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_;
  bool add_bos_ = false, add_eos_ = false;
};

// Loads the tokenizer in `model_dir`: `tokenizer.json` (+ optional `tokenizer_config.json`), else
// `tiktoken.model` + `tokenizer_config.json`. Throws core::Error naming the file and field at
// fault.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace tessera::text
