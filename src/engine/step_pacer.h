// Keeps decodes flowing while prompts arrive (issue 19): a step that carries prefill tokens beside
// running decodes takes longer, and every running sequence's next token waits for it. The pacer
// measures step times and caps the prefill tokens a step may add beside decodes so that such a step
// takes at most `stretch` times a decode-only step.
//
// What a mixed step costs on top of the decodes is modelled as a fixed part plus a part per prefill
// token (on the H200's 4-layer Kimi-shaped model at 128 sequences: ~3 ms, the mixed step's eager
// launches, plus ~50 us a token; a 13 ms decode step became ~22 ms with one 128-token prompt beside
// it and ~29 ms with two), fitted by least squares to the recent mixed steps. A first version
// charged the whole extra time per token and capped at 1.5x: it split single 128-token prompts over
// two mixed steps, paying the fixed part twice, and made every row worse (docs/PERFORMANCE.md). With
// the fixed part counted and 1.8x, one such prompt fits a step and a second waits for the next.
// Prefill still advances every step (at least `min_tokens`), and a step without decodes is not
// capped.
//
// Pacing trades a prompt's wait for smoother decodes, so the wait is bounded: a step may always take
// 1/kDrainSteps of the prefill backlog (every prompt token not computed yet). Without that bound,
// long prompts arriving faster than the paced rate queued without limit: on the H200 at 128
// concurrent with 2048-token prompts arriving at 20 req/s, the cap of ~150 tokens a step left TTFT
// at 39 s and output at 770 tok/s (docs/PERFORMANCE.md). With it, a backlog that keeps growing
// makes the steps take more of it, until prefill keeps up with arrivals.
#pragma once

#include <cstdint>
#include <deque>

namespace tessera::engine {

class StepPacer {
 public:
  // stretch <= 1: no cap (prefill as the token budget allows).
  explicit StepPacer(double stretch = 1.8, int64_t min_tokens = 64);

  // A step takes at least this share of the prefill backlog: pacing delays a prompt by about this
  // many steps at most.
  static constexpr int64_t kDrainSteps = 8;

  // The prefill tokens a step with `decodes` decode tokens may add while `backlog` prompt tokens
  // wait to be computed; -1 = no cap (no decodes, pacing off, or nothing measured yet).
  // Counted (paced_steps, widened_steps): call it once per step that has decodes.
  int64_t prefill_cap(int64_t decodes, int64_t backlog);
  // A finished step of `decodes` decode tokens and `prefill` prefill tokens that took `seconds`
  // (forward and sampling).
  void observe(int64_t decodes, int64_t prefill, double seconds);

  double decode_step_seconds() const { return decode_s_; }
  // The fitted cost of a mixed step beyond a decode-only one: fixed + per_token x prefill tokens.
  double mixed_fixed_seconds() const { return fixed_s_; }
  double prefill_token_seconds() const { return token_s_; }
  // Steps with a backlog given a cap, and of those the ones the backlog share widened beyond the
  // paced tokens.
  int64_t paced_steps() const { return paced_steps_; }
  int64_t widened_steps() const { return widened_steps_; }

 private:
  void fit();

  double stretch_;
  int64_t min_tokens_;
  double decode_s_ = 0;  // moving average of decode-only steps
  struct Mixed {
    double tokens, extra_seconds;
  };
  std::deque<Mixed> mixed_;  // the recent mixed steps: prefill tokens, time beyond decode_s_
  double fixed_s_ = 0, token_s_ = 0;
  int64_t paced_steps_ = 0, widened_steps_ = 0;
};

}  // namespace tessera::engine
