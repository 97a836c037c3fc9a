// Each sampling transform on hand-made logits, against values worked out by hand here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "engine/budgeted_region.h"
#include "engine/sampler.h"

namespace tessera::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SampledToken draw(const std::vector<float>& logits, const SamplingParams& p, Rng& rng,
                  const std::vector<int32_t>& masked = {}) {
  SampleContext ctx;
  ctx.masked = masked;
  return sample_token(logits, p, ctx, rng);
}

TEST(Sampler, PenaltiesFollowTheVllmDefinition) {
  std::vector<float> x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt = {0, 1}, generated = {2, 2, 3};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  apply_penalties(x, p, prompt, generated);
  EXPECT_FLOAT_EQ(x[0], 1.0f);   // prompt, positive: 2 / 2
  EXPECT_FLOAT_EQ(x[1], -2.0f);  // prompt, negative: -1 * 2
  EXPECT_FLOAT_EQ(x[2], -1.0f);  // generated twice: 0.5 / 2 - 2 * 0.5 - 0.25
  EXPECT_FLOAT_EQ(x[3], 0.75f);  // generated once: 3 / 2 - 0.5 - 0.25
  EXPECT_FLOAT_EQ(x[4], -2.0f);  // untouched
}

TEST(Sampler, PresenceAndFrequencyIgnoreThePrompt) {
  std::vector<float> x = {1.0f, 1.0f};
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 1.0f;
  const std::vector<int32_t> prompt = {0, 0, 0}, generated = {};
  apply_penalties(x, p, prompt, generated);
  EXPECT_FLOAT_EQ(x[0], 1.0f);
}

TEST(Sampler, RepetitionPenaltyChangesTheSampledDistribution) {
  // Token 0 dominates without the penalty; with r = 100 on it, token 1 dominates.
  const std::vector<float> logits = {5.0f, 4.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  SampleContext ctx;
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(sample_token(logits, p, ctx, rng).token, 0);
  p.repetition_penalty = 100.0f;
  ctx.prompt = prompt;
  EXPECT_EQ(sample_token(logits, p, ctx, rng).token, 1);
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937_64 gen(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(64);
    for (auto& v : logits) v = nd(gen);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    SamplingParams k1;
    k1.temperature = 1.5f;
    k1.top_k = 1;
    Rng r1(trial), r2(trial);
    const int32_t argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(draw(logits, greedy, r1).token, argmax);
    EXPECT_EQ(draw(logits, k1, r2).token, argmax);
  }
}

TEST(Sampler, MinPPrunesTokensBelowTheFractionOfTheTop) {
  std::vector<float> x = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.1f)};
  SamplingParams p;
  p.min_p = 0.3f;  // threshold 0.15: keeps 0.5 and 0.3
  apply_truncation(x, p);
  EXPECT_FLOAT_EQ(x[0], std::log(0.5f));
  EXPECT_FLOAT_EQ(x[1], std::log(0.3f));
  EXPECT_EQ(x[2], -kInf);
  EXPECT_EQ(x[3], -kInf);
  // And sampling never picks a pruned token.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.1f)};
  Rng rng(3);
  for (int i = 0; i < 500; ++i) EXPECT_LT(draw(logits, p, rng).token, 2);
}

TEST(Sampler, TopKAndTopPKeepTheExpectedSets) {
  const std::vector<float> base = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  SamplingParams p;
  p.top_k = 2;  // 0.5 and 0.3
  auto x = base;
  apply_truncation(x, p);
  EXPECT_EQ(x[0], -kInf);
  EXPECT_EQ(x[2], -kInf);
  EXPECT_EQ(x[1], base[1]);
  EXPECT_EQ(x[3], base[3]);
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3
  x = base;
  apply_truncation(x, p);
  EXPECT_EQ(x[0], -kInf);
  EXPECT_NE(x[3], -kInf);
  p.top_p = 0.85f;  // needs 0.15 too
  x = base;
  apply_truncation(x, p);
  EXPECT_NE(x[0], -kInf);
  EXPECT_EQ(x[2], -kInf);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(100, 0.0f);  // uniform: every draw depends only on the RNG
  SamplingParams p;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 20; ++i) out.push_back(draw(logits, p, rng).token);
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, MaskedTokensAreNeverDrawn) {
  const std::vector<float> logits = {10.0f, 0.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(0);
  EXPECT_EQ(draw(logits, p, rng, {0}).token != 0, true);
}

TEST(Sampler, LogitBiasIsAddedAfterThePenalties) {
  std::vector<float> x = {2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  p.logit_bias = {{0, -100.0f}, {2, 2.5f}};
  const std::vector<int32_t> generated = {2};
  apply_penalties(x, p, {}, generated);
  apply_logit_bias(x, p);
  EXPECT_FLOAT_EQ(x[0], -98.0f);  // 2 - 100
  EXPECT_FLOAT_EQ(x[1], -1.0f);   // untouched
  EXPECT_FLOAT_EQ(x[2], 2.0f);    // 0.5 - 1 (generated once) + 2.5
  // Greedy follows the biased logits; the device op cannot apply a bias, so the host samples.
  p = {};
  p.temperature = 0.0f;
  p.logit_bias = {{1, 100.0f}};
  Rng rng(0);
  EXPECT_EQ(draw({10.0f, 0.0f, 5.0f}, p, rng).token, 1);
  EXPECT_FALSE(op_can_sample(p, SampleContext{}, 3));
  p.logit_bias.clear();
  EXPECT_TRUE(op_can_sample(p, SampleContext{}, 3));
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheSampledDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p;
  p.temperature = 2.0f;
  p.logprobs = 2;
  Rng rng(5);
  const SampledToken t = draw(logits, p, rng);
  // After temperature 2: {0.5, 1, 1.5}.
  const double lse = std::log(std::exp(0.5) + std::exp(1.0) + std::exp(1.5));
  const double expected[3] = {0.5 - lse, 1.0 - lse, 1.5 - lse};
  EXPECT_NEAR(t.logprob, expected[t.token], 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].token, 2);
  EXPECT_NEAR(t.top[0].logprob, expected[2], 1e-6);
  EXPECT_EQ(t.top[1].token, 1);
  EXPECT_NEAR(t.top[1].logprob, expected[1], 1e-6);
  // With top_k = 1 the distribution is a point mass: logprob 0, no other alternative.
  p.top_k = 1;
  const SampledToken k1 = draw(logits, p, rng);
  EXPECT_EQ(k1.token, 2);
  EXPECT_NEAR(k1.logprob, 0.0, 1e-6);
  EXPECT_EQ(k1.top.size(), 1u);
}

TEST(BudgetTracker, ForcesTheEndSequenceAfterExactlyTheBudget) {
  BudgetedRegion region{.start_id = 5, .end_ids = {7, 8}, .budget = 3};
  const std::vector<int32_t> prompt = {1, 5};  // prompt ends inside the region
  BudgetTracker b(region, prompt);
  EXPECT_TRUE(b.open());
  for (int32_t t : {10, 11, 12}) {
    EXPECT_EQ(b.forced_token(), -1);
    b.observe(t);
  }
  EXPECT_EQ(b.forced_token(), 7);
  b.observe(7);
  EXPECT_EQ(b.forced_token(), 8);
  b.observe(8);
  EXPECT_FALSE(b.open());
  EXPECT_EQ(b.forced_token(), -1);
  // A generated start token opens it again with a fresh budget.
  b.observe(5);
  EXPECT_TRUE(b.open());
  for (int32_t t : {10, 11, 12}) {
    EXPECT_EQ(b.forced_token(), -1);
    b.observe(t);
  }
  EXPECT_EQ(b.forced_token(), 7);
}

TEST(BudgetTracker, NaturalCloseAndClosedPrompt) {
  BudgetedRegion region{.start_id = 5, .end_ids = {7, 8}, .budget = 2};
  const std::vector<int32_t> closed = {5, 9, 7, 8};
  BudgetTracker c(region, closed);
  EXPECT_FALSE(c.open());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(c.forced_token(), -1);
    c.observe(9);
  }
  const std::vector<int32_t> open = {5};
  BudgetTracker o(region, open);
  o.observe(7);
  o.observe(8);  // closed by the model itself within the budget
  EXPECT_FALSE(o.open());
  EXPECT_EQ(o.forced_token(), -1);
}

}  // namespace
}  // namespace tessera::engine
