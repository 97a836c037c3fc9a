#include "text/tokenizer/tokenizer.h"

#include "core/error.h"
#include "text/tokenizer/hf_tokenizer.h"
#include "text/tokenizer/load_util.h"
#include "text/tokenizer/tiktoken_tokenizer.h"
#include "text/tokenizer/utf8.h"

namespace tessera::text {

void Tokenizer::set_token(int32_t id, std::string bytes, bool special) {
  TESSERA_CHECK(id >= 0, "negative token id {}", id);
  if (static_cast<size_t>(id) >= bytes_.size()) {
    bytes_.resize(static_cast<size_t>(id) + 1);
    flags_.resize(static_cast<size_t>(id) + 1, 0);
  }
  bytes_[id] = std::move(bytes);
  flags_[id] = static_cast<uint8_t>(kExists | (special ? kSpecial : 0));
}

void Tokenizer::apply_special_token_config(const TokenizerConfig& cfg, const std::filesystem::path& config_path) {
  auto lookup = [&](const std::optional<std::string>& tok, const char* field) -> std::optional<int32_t> {
    if (!tok) return std::nullopt;
    auto id = token_to_id(*tok);
    if (!id) core::fail("{}: {} '{}' is not a token of this vocabulary", config_path.string(), field, *tok);
    return id;
  };
  if (cfg.bos_token) bos_token_ = *cfg.bos_token;
  if (cfg.eos_token) eos_token_ = *cfg.eos_token;
  bos_id_ = lookup(cfg.bos_token, "bos_token");
  eos_id_ = lookup(cfg.eos_token, "eos_token");
  add_bos_ = cfg.add_bos_token;
  add_eos_ = cfg.add_eos_token;
}

void Tokenizer::unknown_id(int32_t id) const {
  core::fail("token id {} is not in the vocabulary (valid ids are below {})", id, vocab_size());
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!has_id(id)) unknown_id(id);
  return bytes_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (!has_id(id)) unknown_id(id);
    if (skip_special && (flags_[id] & kSpecial)) continue;
    raw += bytes_[id];
  }
  return utf8_lossy(raw);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec))
    core::fail("{}: tokenizer directory not found", model_dir.string());
  if (std::filesystem::exists(model_dir / "tokenizer.json", ec)) return load_hf_tokenizer(model_dir);
  if (std::filesystem::exists(model_dir / "tiktoken.model", ec)) return load_tiktoken_tokenizer(model_dir);
  core::fail("{}: no tokenizer found (expected tokenizer.json, or tiktoken.model with tokenizer_config.json)",
             model_dir.string());
}

}  // namespace tessera::text
