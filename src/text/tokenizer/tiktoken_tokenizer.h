// tiktoken BPE as Kimi-K2 ships it: `tiktoken.model` (base64 token, space, rank per line; rank ==
// id), Kimi's split pattern, 256 special slots after the base vocabulary named from
// tokenizer_config.json:added_tokens_decoder (the rest `<|reserved_token_{id}|>`), and Kimi's
// long-input slicing (400,000-char chunks, runs of at most 25,000 whitespace / non-whitespace
// chars), reproduced exactly because it changes the ids of pathological inputs.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tessera::text {

// Kimi-K2's pat_str (tokenization_kimi.py), in Rust regex syntax.
extern const std::string_view kKimiPattern;

// Reads model_dir/tiktoken.model and model_dir/tokenizer_config.json.
std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::filesystem::path& model_dir);

// Kimi's _split_whitespaces_or_nonwhitespaces over 400,000-char chunks: byte ranges of the slices
// that are encoded independently (exposed for tests). `text` must be valid UTF-8.
std::vector<std::string_view> kimi_slices(std::string_view text, size_t max_chunk_chars = 400000,
                                          size_t max_run_chars = 25000);

}  // namespace tessera::text
