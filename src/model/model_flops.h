// Model FLOPs of a prompt's prefill, from the config alone: what `tessera bench prefill` divides by
// the measured time and compares with the GPU's GEMM rate (MFU). Conventions (PaLM's MFU): 2 FLOPs
// per multiply-add of every matrix a token passes through (the routed experts it is sent to, not
// all of them; the router; kv_b on every prompt token, as the decompressed MLA prefill runs it),
// causal attention over the prompt (scores and values, each query over itself and the tokens
// before it), and lm_head for the last token only (prefill samples one token). Norms, rope,
// softmax and the embedding lookup are not counted.
#pragma once

#include <cstdint>

#include "io/model_config.h"

namespace tessera::model {

struct PrefillFlops {
  double linear = 0;     // the projections and experts of every layer, over every prompt token
  double attention = 0;  // Q·Kᵀ and P·V over the causal prompt
  double lm_head = 0;    // one token's logits
  double total() const { return linear + attention + lm_head; }
};

// FLOPs of prefilling `prompt_len` tokens with nothing cached. Throws on a negative length.
PrefillFlops prefill_flops(const io::ModelConfig& c, int64_t prompt_len);

}  // namespace tessera::model
