// The engine's step pacer (engine/step_pacer.h): the prefill tokens a step may add beside decodes,
// from the step times it has seen, worked out by hand.
#include "engine/step_pacer.h"

#include <gtest/gtest.h>

namespace tessera::engine {
namespace {

TEST(StepPacer, CapsPrefillSoThatAMixedStepStaysWithinTheStretch) {
  StepPacer p(1.5, 16);
  EXPECT_EQ(p.prefill_cap(8, 0), -1);  // nothing measured yet
  p.observe(8, 0, 0.010);              // decode-only steps of 10 ms
  EXPECT_EQ(p.prefill_cap(8, 0), -1);  // the cost of a prefill token not measured yet
  p.observe(8, 100, 0.020);            // 100 prefill tokens added 10 ms: one size, so 0.1 ms a token
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(), 0.010);
  EXPECT_DOUBLE_EQ(p.prefill_token_seconds(), 0.0001);
  EXPECT_DOUBLE_EQ(p.mixed_fixed_seconds(), 0.0);
  // 1.5 x 10 ms allows 5 ms of prefill: 50 tokens.
  EXPECT_EQ(p.prefill_cap(8, 0), 50);
  EXPECT_EQ(p.prefill_cap(0, 0), -1);  // a step without decodes is not capped
  // Moving averages: a slower decode-only step (20 ms) moves the decode time by a fifth of the gap.
  p.observe(8, 0, 0.020);
  EXPECT_NEAR(p.decode_step_seconds(), 0.012, 1e-12);
  EXPECT_EQ(p.prefill_cap(8, 0), 60);
  // Prefill-only steps say nothing about decodes.
  p.observe(0, 500, 1.0);
  EXPECT_NEAR(p.decode_step_seconds(), 0.012, 1e-12);
}

// The H200 measurement the pacer was refitted for (docs/PERFORMANCE.md): 13 ms decode steps, one
// 128-token prompt beside them 22.4 ms, two 28.8 ms: a fixed 3 ms and 50 us a token.
void observe_h200_steps(StepPacer& p) {
  p.observe(127, 0, 0.013);
  for (int i = 0; i < 4; ++i) {
    p.observe(127, 128, 0.0224);
    p.observe(127, 256, 0.0288);
  }
}

// At 1.8x one prompt fits a step whole and a second does not; charging everything per token at
// 1.5x (the first version) split even one prompt.
TEST(StepPacer, FitsTheFixedPartOfAMixedStepAndKeepsOnePromptWhole) {
  StepPacer p(1.8, 64);
  observe_h200_steps(p);
  EXPECT_NEAR(p.mixed_fixed_seconds(), 0.003, 1e-9);
  EXPECT_NEAR(p.prefill_token_seconds(), 0.00005, 1e-12);
  const int64_t cap = p.prefill_cap(127, 0);
  EXPECT_GE(cap, 128);  // (0.8 x 13 - 3) / 0.05 = 148
  EXPECT_LE(cap, 148);
  StepPacer first_version(1.5, 64);
  first_version.observe(127, 0, 0.013);
  first_version.observe(127, 128, 0.0224);
  EXPECT_LT(first_version.prefill_cap(127, 0), 128);
}

TEST(StepPacer, NeverBelowTheFloorAndOffAtAStretchOfOne) {
  StepPacer p(1.8, 16);
  p.observe(8, 0, 0.010);
  p.observe(8, 10, 0.100);             // 9 ms a token
  EXPECT_EQ(p.prefill_cap(8, 0), 16);  // prompts still advance
  // A fixed part larger than the room leaves only the floor.
  StepPacer q(1.8, 16);
  q.observe(8, 0, 0.010);
  q.observe(8, 10, 0.020);
  q.observe(8, 20, 0.0201);  // fixed ~9.9 ms: more than 0.8 x 10 ms
  EXPECT_EQ(q.prefill_cap(8, 0), 16);
  StepPacer off(1.0);
  off.observe(8, 0, 0.010);
  off.observe(8, 100, 0.020);
  EXPECT_EQ(off.prefill_cap(8, 0), -1);
}

// Long prompts arriving faster than the paced rate (the H200's 128 concurrent with 2048-token prompts
// at 20 req/s: the cap of ~150 tokens left TTFT at 39 s): a step takes at least 1/kDrainSteps of the
// backlog, so no prompt waits more than about kDrainSteps steps for pacing's sake.
TEST(StepPacer, TakesAShareOfTheBacklogSoThatNoPromptWaitsWithoutBound) {
  StepPacer p(1.8, 64);
  observe_h200_steps(p);
  const int64_t paced = p.prefill_cap(127, 0);
  EXPECT_EQ(paced, 148);          // (0.8 x 13 ms - 3 ms) / 50 us
  EXPECT_EQ(p.paced_steps(), 0);  // no prompt tokens waited: nothing paced
  EXPECT_EQ(p.prefill_cap(127, 100), 148);
  EXPECT_EQ(p.paced_steps(), 1);
  EXPECT_EQ(p.widened_steps(), 0);
  static_assert(StepPacer::kDrainSteps == 8);
  // A backlog the paced rate clears within 8 steps: paced.
  EXPECT_EQ(p.prefill_cap(127, 8 * 148), 148);
  // Twenty 2048-token prompts waiting: an eighth of them a step.
  EXPECT_EQ(p.prefill_cap(127, 20 * 2048), 20 * 2048 / 8);
  EXPECT_EQ(p.prefill_cap(127, 8 * 148 + 1), 149);  // rounded up: the backlog is gone in 8 steps
  EXPECT_EQ(p.paced_steps(), 4);
  EXPECT_EQ(p.widened_steps(), 2);
  // Off stays off, and a step without decodes stays uncapped, whatever the backlog.
  StepPacer off(1.0);
  off.observe(8, 0, 0.010);
  off.observe(8, 100, 0.020);
  EXPECT_EQ(off.prefill_cap(8, 1 << 20), -1);
  EXPECT_EQ(p.prefill_cap(0, 1 << 20), -1);
}

}  // namespace
}  // namespace tessera::engine
