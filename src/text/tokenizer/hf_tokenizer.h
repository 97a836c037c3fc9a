// HF `tokenizer.json` byte-level BPE (HF tokenizers semantics): added tokens matched first (raw
// text for normalized=false tokens, normalized text for the others), then normalizer,
// pre-tokenizer pipeline, BPE by merge rank, ByteLevel decoding.
#pragma once

#include <filesystem>
#include <memory>

#include "text/tokenizer/tokenizer.h"

namespace tessera::text {

// Reads model_dir/tokenizer.json and, when present, model_dir/tokenizer_config.json.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& model_dir);

}  // namespace tessera::text
