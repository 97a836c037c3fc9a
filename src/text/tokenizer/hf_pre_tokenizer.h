// HF tokenizers pre-tokenizers (the subset byte-level BPE models use): Sequence, Split (regex or
// literal; behaviours Removed / Isolated / MergedWithPrevious / MergedWithNext / Contiguous;
// invert), ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern).
// Pieces are views into the input text or into strings kept alive by an Arena.
#pragma once

#include <nlohmann/json.hpp>

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/regex.h"

namespace tessera::text {

using Arena = std::deque<std::string>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits one piece, appending the resulting pieces to `out`.
  virtual void split(std::string_view piece, Arena& arena, std::vector<std::string_view>& out) const = 0;
  // Whether the pipeline contains a ByteLevel step (required: we only support byte-level BPE).
  virtual bool has_byte_level() const { return false; }
};

// Builds the pipeline from tokenizer.json's "pre_tokenizer" (null -> nullptr). `where` names the
// file and field for errors.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

// Runs `pre` (may be null) on `text`.
void pre_tokenize(const PreTokenizer* pre, std::string_view text, Arena& arena, std::vector<std::string_view>& out);

}  // namespace tessera::text
