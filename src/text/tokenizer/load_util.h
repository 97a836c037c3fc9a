// File and JSON helpers for the tokenizer loaders: every error names the file (and field).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace tessera::text {

std::string read_file_or_fail(const std::filesystem::path& path);
nlohmann::json parse_json_file(const std::filesystem::path& path);

// Settings of tokenizer_config.json that both tokenizer kinds use.
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token;  // token strings (string or {"content": ...})
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::string tokenizer_class;
  nlohmann::json added_tokens_decoder;  // object or null
};
// Missing file -> defaults (when !required) or an error.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& path, bool required);

}  // namespace tessera::text
