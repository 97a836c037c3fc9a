// Keeps decodes flowing while prompts arrive (issue 19): a step that carries prefill tokens beside
// running decodes takes longer, and every running sequence's next token waits for it. The pacer
// measures step times (decode-only steps, and what each prefill token adds to a mixed one) and caps
// the prefill tokens a step may add beside decodes so that such a step takes at most `stretch`
// times a decode-only step. Prefill still advances every step (at least `min_tokens`), and a step
// without decodes is not capped. On the H200's 4-layer Kimi-shaped model at 128 sequences, a
// 128-token prompt beside the decodes stretched a 13 ms step to ~22 ms (docs/PERFORMANCE.md).
#pragma once

#include <cstdint>

namespace tessera::engine {

class StepPacer {
 public:
  // stretch <= 1: no cap (prefill as the token budget allows).
  explicit StepPacer(double stretch = 1.5, int64_t min_tokens = 64);

  // The prefill tokens a step with `decodes` decode tokens may add; -1 = no cap (no decodes,
  // pacing off, or nothing measured yet).
  int64_t prefill_cap(int64_t decodes) const;
  // A finished step of `decodes` decode tokens and `prefill` prefill tokens that took `seconds`
  // (forward and sampling).
  void observe(int64_t decodes, int64_t prefill, double seconds);

  double decode_step_seconds() const { return decode_s_; }
  double prefill_token_seconds() const { return token_s_; }

 private:
  double stretch_;
  int64_t min_tokens_;
  double decode_s_ = 0;  // moving average of decode-only steps
  double token_s_ = 0;   // moving average of a prefill token's cost in a mixed step
};

}  // namespace tessera::engine
