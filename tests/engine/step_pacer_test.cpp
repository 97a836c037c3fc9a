// The engine's step pacer (engine/step_pacer.h): the prefill tokens a step may add beside decodes,
// from the step times it has seen, worked out by hand.
#include "engine/step_pacer.h"

#include <gtest/gtest.h>

namespace tessera::engine {
namespace {

TEST(StepPacer, CapsPrefillSoThatAMixedStepStaysWithinTheStretch) {
  StepPacer p(1.5, 16);
  EXPECT_EQ(p.prefill_cap(8), -1);  // nothing measured yet
  p.observe(8, 0, 0.010);           // decode-only steps of 10 ms
  EXPECT_EQ(p.prefill_cap(8), -1);  // the cost of a prefill token not measured yet
  p.observe(8, 100, 0.020);         // 100 prefill tokens added 10 ms: 0.1 ms a token
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(), 0.010);
  EXPECT_DOUBLE_EQ(p.prefill_token_seconds(), 0.0001);
  // 1.5 x 10 ms allows 5 ms of prefill: 50 tokens.
  EXPECT_EQ(p.prefill_cap(8), 50);
  EXPECT_EQ(p.prefill_cap(0), -1);  // a step without decodes is not capped
  // Moving averages: a slower decode-only step (20 ms) moves the decode time by a fifth of the gap.
  p.observe(8, 0, 0.020);
  EXPECT_NEAR(p.decode_step_seconds(), 0.012, 1e-12);
  EXPECT_EQ(p.prefill_cap(8), 60);
  // Prefill-only steps say nothing about decodes.
  p.observe(0, 500, 1.0);
  EXPECT_NEAR(p.decode_step_seconds(), 0.012, 1e-12);
  // Never below the floor, so that prompts advance however slow a token is.
  p.observe(8, 10, 0.100);  // 8.8 ms a token
  EXPECT_EQ(p.prefill_cap(8), 16);
}

TEST(StepPacer, OffAtAStretchOfOne) {
  StepPacer p(1.0);
  p.observe(8, 0, 0.010);
  p.observe(8, 100, 0.020);
  EXPECT_EQ(p.prefill_cap(8), -1);
}

}  // namespace
}  // namespace tessera::engine
