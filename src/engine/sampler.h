// Turns one row of logits into a token. Every step of the pipeline is a separate function so the
// tests can check each transform on hand-made logits:
//   1. apply_penalties: repetition (prompt + generated; HF/CTRL rule: positive logits divided by
//      r, negative multiplied by r), then frequency (count in generated) and presence (once if in
//      generated) subtracted, as vLLM does; then apply_logit_bias: the request's logit_bias added;
//   2. mask_tokens: ids set to -inf (min_tokens hides stop ids and EOS), and every token outside the
//      allowed bitmask of constrained decoding (token_constraint.h);
//   3. temperature: logits / T (greedy, T == 0, stops here and takes the first argmax);
//   4. apply_truncation: min_p (keep p >= min_p * p_max), then top_k, then top_p (smallest set of
//      most likely tokens whose mass reaches top_p); pruned tokens become -inf;
//   5. a draw from the request's RNG (one uniform per drawn token, so batching cannot change it).
// Logprobs are the log-softmax of the final distribution that was sampled from: after steps 1-4
// (for greedy: after steps 1-2, temperature 1, no truncation). Pruned tokens have -inf.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "ops/sampling_rule.h"

namespace tessera::engine {

// Per-sample random stream; a fixed seed gives a fixed sequence of draws.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::mt19937_64 gen_;
};

void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated);
void apply_logit_bias(std::span<float> logits, const SamplingParams& p);
void mask_tokens(std::span<float> logits, std::span<const int32_t> ids);
// `logits` already divided by the temperature.
void apply_truncation(std::span<float> logits, const SamplingParams& p);
// In-place log-softmax (-inf stays -inf).
void log_softmax(std::span<float> logits);

struct SampleContext {
  std::span<const int32_t> prompt;
  std::span<const int32_t> generated;
  std::span<const int32_t> masked;  // ids that may not be drawn this step
  int32_t forced = -1;              // >= 0: emit this token instead of drawing
  // Constrained decoding: when not empty, only the tokens whose bit is set may be drawn
  // (token_bitmask_words(vocab) words). Should min_tokens mask every allowed token, the allowed
  // set wins: the constraint is what keeps the output well-formed.
  std::span<const uint32_t> allowed;
};

// Sets every logit outside `allowed` (a token bitmask) to -inf.
void mask_disallowed(std::span<float> logits, std::span<const uint32_t> allowed);

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p, const SampleContext& ctx, Rng& rng);

// Whether ops::Ops::sample draws this token as sample_token would (the same distribution and the
// same use of the RNG), so that the engine can sample on the device and copy back only the id: no
// penalties, logit bias, masked ids, min_p, forced token or alternatives in the logprobs, a temperature with a
// finite reciprocal, and a vocabulary the op accepts. A constrained row's allowed bitmask does not
// stand in the way: the engine applies it on the device first (Ops::mask_logits), which is
// mask_disallowed for a row without penalties or bias.
bool op_can_sample(const SamplingParams& p, const SampleContext& ctx, int64_t vocab);
// The op's parameters for such a token; draws the uniform from `rng` exactly when sample_token
// would (not for greedy), so a seeded request gives the same tokens whichever path drew them.
ops::SampleRow op_sample_row(const SamplingParams& p, Rng& rng);

}  // namespace tessera::engine
