// Per-request generation settings. Semantics follow vLLM / the OpenAI API (docs/ENGINE.md
// "Sampling"): penalties, then temperature, then min_p, top_k and top_p truncation, then a draw
// from the request's own RNG.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/token_constraint.h"

namespace tessera::engine {

// A token-budgeted region (e.g. a reasoning budget): tokens generated between `start_id` and the
// `end_ids` sequence are counted; once `budget` of them were generated and the region is still
// open, the engine emits `end_ids` itself. The region may already be open when generation starts:
// either `starts_open` is set, or the prompt's last `start_id` is not followed by `end_ids`.
struct BudgetedRegion {
  int32_t start_id = -1;         // -1: the region only opens through the prompt / starts_open
  std::vector<int32_t> end_ids;  // the closing sequence (one or more tokens)
  int64_t budget = 0;            // tokens allowed inside the region before it is closed
  bool starts_open = false;
};

struct SamplingParams {
  int64_t n = 1;  // independent samples sharing the prompt's KV pages
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;           // stop ids / EOS are masked until this many tokens exist
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]
  int64_t top_k = 0;                // 0 or -1: off
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // subtracted once from tokens that were generated
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the generated tokens
  float repetition_penalty = 1.0f;  // prompt + generated tokens: positive logits / r, negative * r
  // OpenAI's logit_bias: (token id, value in [-100, 100]) added to the logit after the penalties,
  // before masking and temperature (as vLLM). Ids unique and within the vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;  // same seed + prompt => same tokens, whatever the batch
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> eos_token_ids;  // given by the caller (the model's EOS ids)
  bool ignore_eos = false;
  std::optional<int64_t> logprobs;  // nullopt: off; k >= 0: chosen token + k alternatives
  std::optional<BudgetedRegion> budgeted_region;
  // Constrained decoding (response_format, tool_choice): each sample gets its own constraint, and
  // while it is active only the tokens it allows are drawn (applied like mask_tokens, sampler.h).
  std::shared_ptr<const TokenConstraintFactory> constraint;
#if TESSERA_TEST_HOOKS
  // Test hook (builds with TESSERA_TEST_HOOKS; the server exposes it only with --enable-test-script):
  // the i-th generated token is scripted_tokens[i] instead of a draw, while the forward pass,
  // logprobs, stop/EOS checks and the budgeted region (which takes precedence) run as usual.
  // Afterwards sampling resumes.
  std::vector<int32_t> scripted_tokens;
#endif
};

}  // namespace tessera::engine
