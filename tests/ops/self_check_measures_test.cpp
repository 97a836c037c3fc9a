// The measures the start-up self-check judges a backend's ops by: the deviation of an output from
// the reference's (ops/deviation.h) and the routing check (ops/routing_check.h), on hand-made
// values where the right answer is known.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/deviation.h"
#include "ops/routing_check.h"

namespace tessera::ops {
namespace {

TEST(Deviation, EqualValuesAreZero) {
  const std::vector<float> v = {1, -2, 3, 0, 5, 6};
  EXPECT_EQ(deviation(v, v, 3).max_rel, 0.0);
}

TEST(Deviation, SmallElementsCountAgainstTheirRowsRms) {
  // Row [1, 7]: rms 5; an error of 0.1 on its 1 is 0.1 / 5.
  const std::vector<float> want = {1, 7, 0.001f, 0.002f}, got = {1.1f, 7, 0.001f, 0.002f};
  const Deviation d = deviation(got, want, 2);
  EXPECT_NEAR(d.max_rel, 0.02, 1e-6);
  EXPECT_EQ(d.row, 0);
  EXPECT_EQ(d.col, 0);
  EXPECT_FLOAT_EQ(d.got, 1.1f);
  EXPECT_FLOAT_EQ(d.want, 1.0f);
  // The second row is held to its own (tiny) scale, not the first row's: 0.001 off there is 63%.
  const std::vector<float> got2 = {1, 7, 0.002f, 0.002f};
  const Deviation d2 = deviation(got2, want, 2);
  EXPECT_EQ(d2.row, 1);
  EXPECT_GT(d2.max_rel, 0.5);
}

TEST(Deviation, AnOutlierKeepsItsOwnRelativePrecision) {
  // One huge channel (a real model's residual stream): bf16 rounding of it, 2^-9 of itself, is not
  // an error of 1000 / rms, and the small channels beside it still count against the row's rms.
  std::vector<float> want(64, 1.0f), got(64, 1.0f);
  want[7] = 1000.0f;
  got[7] = 1000.0f * (1 + 1.0f / 512);
  EXPECT_NEAR(deviation(got, want, 64).max_rel, 1.0 / 512, 1e-4);
}

TEST(Deviation, ASingleWrongElementIsNotDiluted) {
  std::vector<float> want(4096, 1.0f), got = want;
  got[4000] = 2.0f;
  const Deviation d = deviation(got, want, 64);
  EXPECT_NEAR(d.max_rel, 1.0, 1e-6);
  EXPECT_EQ(d.row, 62);
  EXPECT_EQ(d.col, 32);
}

TEST(Deviation, NonFiniteValues) {
  EXPECT_TRUE(std::isinf(deviation(std::vector<float>{NAN, 1}, std::vector<float>{1, 1}, 2).max_rel));
  EXPECT_TRUE(std::isinf(deviation(std::vector<float>{INFINITY, 1}, std::vector<float>{1, 1}, 2).max_rel));
  // A non-finite reference must be matched exactly.
  EXPECT_EQ(deviation(std::vector<float>{-INFINITY, 1}, std::vector<float>{-INFINITY, 1}, 2).max_rel, 0.0);
  EXPECT_EQ(deviation(std::vector<float>{NAN, 1}, std::vector<float>{NAN, 1}, 2).max_rel, 0.0);
  EXPECT_TRUE(std::isinf(deviation(std::vector<float>{0, 1}, std::vector<float>{-INFINITY, 1}, 2).max_rel));
}

TEST(Deviation, ValuesWhereTheReferenceIsExactlyZero) {
  // A zero row of an otherwise non-zero tensor: a value there counts against 1e-6 of the tensor's rms.
  const std::vector<float> want = {1, 1, 0, 0};
  EXPECT_LT(deviation(std::vector<float>{1, 1, 1e-9f, 0}, want, 2).max_rel, 0.01);
  EXPECT_GT(deviation(std::vector<float>{1, 1, 0.01f, 0}, want, 2).max_rel, 100);
  EXPECT_EQ(deviation(std::vector<float>{0, 0}, std::vector<float>{0, 0}, 2).max_rel, 0.0);
}

TEST(Deviation, DescribesWhere) {
  const std::vector<float> want = {1, 2, 3, 4}, got = {1, 2, 3, 8};
  EXPECT_EQ(deviation(got, want, 2).describe(), "max relative error 1 at [1, 1] (got 8, reference 4)");
}

// Logits that give expert e the selection score sigmoid(logit) + bias.
float logit_for(float score) { return std::log(score / (1 - score)); }

struct Router {
  RouterConfig cfg;
  std::vector<float> logits, bias;
};
// 8 experts in `groups` groups, top 2, one token with these scores (bias 0).
Router router(std::vector<float> scores, int64_t groups = 1, int64_t top_groups = 1) {
  Router r;
  r.cfg = {static_cast<int64_t>(scores.size()), 2, groups, top_groups, true, 2.5f};
  for (float s : scores) r.logits.push_back(logit_for(s));
  r.bias.assign(scores.size(), 0.0f);
  return r;
}
// The weights the reference gives experts a and b of `scores`.
std::vector<float> weights(const std::vector<float>& scores, int a, int b) {
  const float s = scores[a] + scores[b];
  return {scores[a] / s * 2.5f, scores[b] / s * 2.5f};
}

TEST(RoutingCheck, TheReferencesChoiceInAnyOrderPasses) {
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.6f};
  const Router r = router(s);
  const RoutingCheck a = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 3}, weights(s, 1, 3), 1e-3);
  EXPECT_TRUE(a.problem.empty()) << a.problem;
  EXPECT_LT(a.weights.max_rel, 1e-6);
  const RoutingCheck b = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{3, 1}, weights(s, 3, 1), 1e-3);
  EXPECT_TRUE(b.problem.empty()) << b.problem;
  EXPECT_LT(b.weights.max_rel, 1e-6);
}

TEST(RoutingCheck, ANearTieMayGoEitherWay) {
  // Experts 3 and 7 score within 1e-4: a correct kernel may pick either as the second.
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.79995f};
  const Router r = router(s);
  const RoutingCheck c = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 7}, weights(s, 1, 7), 1e-3);
  EXPECT_TRUE(c.problem.empty()) << c.problem;
  // Not with a tie tolerance below the gap.
  EXPECT_FALSE(
      check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 7}, weights(s, 1, 7), 1e-6).problem.empty());
}

TEST(RoutingCheck, AnExpertFarDownTheOrderFails) {
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.6f};
  const Router r = router(s);
  const RoutingCheck c = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 0}, weights(s, 1, 0), 1e-3);
  EXPECT_NE(c.problem.find("token 0: expert 0"), std::string::npos) << c.problem;
}

TEST(RoutingCheck, BadIdsFail) {
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.6f};
  const Router r = router(s);
  EXPECT_NE(check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 8}, std::vector<float>{1, 1}, 1e-3)
                .problem.find("outside"),
            std::string::npos);
  EXPECT_NE(check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 1}, std::vector<float>{1, 1}, 1e-3)
                .problem.find("twice"),
            std::string::npos);
}

TEST(RoutingCheck, WrongWeightsShowAsADeviation) {
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.6f};
  const Router r = router(s);
  std::vector<float> w = weights(s, 1, 3);
  w[1] *= 2;
  const RoutingCheck c = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 3}, w, 1e-3);
  EXPECT_TRUE(c.problem.empty()) << c.problem;
  EXPECT_GT(c.weights.max_rel, 0.5);
  EXPECT_EQ(c.weights.col, 1);
}

TEST(RoutingCheck, BiasSelectsButDoesNotWeigh) {
  // Expert 0's bias lifts it above expert 3 for the choice; its weight is still its unbiased score.
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.5f, 0.6f};
  Router r = router(s);
  r.bias[0] = 0.75f;
  EXPECT_TRUE(
      check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 0}, weights(s, 1, 0), 1e-3).problem.empty());
  EXPECT_FALSE(
      check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{1, 3}, weights(s, 1, 3), 1e-3).problem.empty());
}

TEST(RoutingCheck, GroupLimitedRouting) {
  // 4 groups of 2, top 1 group: group scores (sum of both) 1.0, 1.1, 0.5, 1.3 -> group 3 (experts 6, 7).
  const std::vector<float> s = {0.5f, 0.5f, 0.95f, 0.15f, 0.2f, 0.3f, 0.6f, 0.7f};
  const Router r = router(s, 4, 1);
  EXPECT_TRUE(
      check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{7, 6}, weights(s, 7, 6), 1e-3).problem.empty());
  // Expert 2 scores highest of all, but its group is excluded.
  const RoutingCheck c = check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{7, 2}, weights(s, 7, 2), 1e-3);
  EXPECT_NE(c.problem.find("group 1"), std::string::npos) << c.problem;
  // A near-tie between groups swaps whole groups: group 1 (1.1) within 2 * 0.15 of group 3 (1.3).
  EXPECT_TRUE(
      check_routing(r.logits, r.bias, r.cfg, std::vector<int32_t>{2, 3}, weights(s, 2, 3), 0.15).problem.empty());
}

}  // namespace
}  // namespace tessera::ops
