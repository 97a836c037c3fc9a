// Ops::sample on the CPU reference backend: greedy and its ties, the equivalences of the limits
// (top_k 1, tiny top_p), a four-token distribution worked out by hand, the distribution over many
// uniforms against a double-precision truncated softmax written independently here, and the
// argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

namespace tessera {
namespace {

using core::DType;
using core::Tensor;
using ops::SampleRow;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

// One call of the op over `logits` (one row per entry of `rows`, all of width logits.size()/rows).
Out run(const std::vector<float>& logits, const std::vector<SampleRow>& rows) {
  ops::cpu::CpuOps cpu;
  const auto n = static_cast<int64_t>(rows.size());
  Tensor x = cpu.from_host_f32({n, static_cast<int64_t>(logits.size()) / n}, logits.data());
  Tensor ids = cpu.empty_i32({n});
  Tensor lp = cpu.empty({n});
  cpu.sample(x, rows, ids, &lp);
  return {cpu.to_host_i32(ids), cpu.to_host_f32(lp)};
}

// The token drawn from a single row for each uniform in `us`.
std::vector<int32_t> draws(const std::vector<float>& row, SampleRow p, const std::vector<double>& us) {
  std::vector<float> logits;
  std::vector<SampleRow> rows;
  for (double u : us) {
    logits.insert(logits.end(), row.begin(), row.end());
    p.uniform = u;
    rows.push_back(p);
  }
  return run(logits, rows).ids;
}

SampleRow params(float temperature, int32_t top_k = 0, float top_p = 1.0f, double uniform = 0.0) {
  return SampleRow{temperature, top_k, top_p, uniform};
}

TEST(Sample, GreedyTakesTheFirstArgmaxAndIgnoresTruncationAndUniform) {
  const std::vector<float> logits = {1.0f,  3.0f,  3.0f, 2.0f,   // tie at the top: id 1
                                     -kInf, -1.0f, 0.0f, -0.0f,  // +0 and -0 are one value: id 2
                                     4.0f,  5.0f,  4.0f, 5.0f};
  const Out out = run(logits, {params(0.0f), params(0.0f, 3, 0.5f, 0.9), params(0.0f, 1, 1.0f, 0.999)});
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2, 1}));
  // Greedy logprob: log-softmax at temperature 1 over all tokens.
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(out.logprobs[0], 3.0 - z, 1e-5);
}

TEST(Sample, RowsOfMinusInfinityOrNanGiveTokenZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Out out = run({-kInf, -kInf, -kInf, nan, nan, -kInf, nan, 1.0f, nan},
                      {params(0.0f), params(0.7f, 0, 1.0f, 0.5), params(1.0f, 0, 1.0f, 0.5)});
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 0, 1}));  // NaN ranks as -inf
  EXPECT_EQ(out.logprobs[0], -kInf);
  EXPECT_NEAR(out.logprobs[2], 0.0f, 1e-6);  // the only finite token has all the mass
}

TEST(Sample, TopKOneAndATinyTopPEqualGreedy) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> row(300);
    for (auto& v : row) v = core::round_to_bf16(nd(rng));  // bf16 rounding makes ties likely
    if (trial % 5 == 0) row[250] = row[40] = 20.0f;        // an exact tie for the maximum
    const int32_t greedy = draws(row, params(0.0f), {0.0})[0];
    std::vector<double> us(20);
    for (auto& u : us) u = ud(rng);
    for (int32_t id : draws(row, params(0.8f, 1), us)) EXPECT_EQ(id, greedy) << "top_k 1, trial " << trial;
    for (int32_t id : draws(row, params(1.3f, 0, 1e-6f), us)) EXPECT_EQ(id, greedy) << "top_p 1e-6, trial " << trial;
  }
}

TEST(Sample, TopKOffValuesAreEquivalent) {
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> row(1000);
  for (auto& v : row) v = nd(rng);
  std::vector<double> us(200);
  for (size_t i = 0; i < us.size(); ++i) us[i] = (static_cast<double>(i) + 0.5) / static_cast<double>(us.size());
  const auto off = draws(row, params(0.9f, 0, 0.95f), us);
  for (int32_t k : {-1, 1000, 5000}) EXPECT_EQ(draws(row, params(0.9f, k, 0.95f), us), off) << "top_k " << k;
}

// p = {0.1, 0.4, 0.2, 0.3}. Cumulative masses in id order decide the token; the kept set is chosen
// in probability order.
class HandMade : public ::testing::Test {
 protected:
  std::vector<float> row = {std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)};
  void expect(SampleRow p, const std::vector<double>& us, const std::vector<int32_t>& want,
              const std::vector<double>& want_p) {
    for (size_t i = 0; i < us.size(); ++i) {
      p.uniform = us[i];
      const Out out = run(row, {p});
      EXPECT_EQ(out.ids[0], want[i]) << "uniform " << us[i];
      EXPECT_NEAR(out.logprobs[0], std::log(want_p[i]), 1e-5) << "uniform " << us[i];
    }
  }
};

TEST_F(HandMade, NoTruncation) {
  // cumulative 0.1 | 0.5 | 0.7 | 1.0
  expect(params(1.0f), {0.0, 0.05, 0.15, 0.49, 0.55, 0.69, 0.75, 0.999}, {0, 0, 1, 1, 2, 2, 3, 3},
         {0.1, 0.1, 0.4, 0.4, 0.2, 0.2, 0.3, 0.3});
}

TEST_F(HandMade, TopKTwoKeepsIds1And3) {
  // kept {1: 0.4, 3: 0.3} / 0.7: cumulative 4/7 = 0.571 | 1.0
  expect(params(1.0f, 2), {0.0, 0.5, 0.6, 0.999}, {1, 1, 3, 3}, {4 / 7.0, 4 / 7.0, 3 / 7.0, 3 / 7.0});
}

TEST_F(HandMade, TopP) {
  // 0.6: 0.4 < 0.6, 0.4 + 0.3 >= 0.6, so {1, 3} as for top_k 2.
  expect(params(1.0f, 0, 0.6f), {0.5, 0.6}, {1, 3}, {4 / 7.0, 3 / 7.0});
  // 0.75: 0.4, 0.7, 0.9 >= 0.75: {1, 2, 3} / 0.9, cumulative 0.444 | 0.667 | 1.0
  expect(params(1.0f, 0, 0.75f), {0.4, 0.5, 0.7}, {1, 2, 3}, {4 / 9.0, 2 / 9.0, 3 / 9.0});
}

TEST_F(HandMade, TopPAppliesToTheRenormalisedTopK) {
  // top-3 = {1, 3, 2} / 0.9 = 0.444, 0.333, 0.222: 0.444 < 0.5 <= 0.778, so {1, 3} / 0.7.
  expect(params(1.0f, 3, 0.5f), {0.5, 0.6}, {1, 3}, {4 / 7.0, 3 / 7.0});
}

TEST_F(HandMade, TemperatureTwoFlattens) {
  // weights sqrt(p): 0.3162, 0.6325, 0.4472, 0.5477 (sum 1.9436):
  // cumulative 0.1627 | 0.4881 | 0.7182 | 1.0
  const double z = std::sqrt(0.1) + std::sqrt(0.4) + std::sqrt(0.2) + std::sqrt(0.3);
  expect(params(2.0f), {0.16, 0.17, 0.48, 0.50, 0.71, 0.72}, {0, 1, 1, 2, 2, 3},
         {std::sqrt(0.1) / z, std::sqrt(0.4) / z, std::sqrt(0.4) / z, std::sqrt(0.2) / z, std::sqrt(0.2) / z,
          std::sqrt(0.3) / z});
}

TEST(Sample, TiesAtTheTopKBoundaryKeepTheLowestIds) {
  // Three tokens share the top value; top_k 2 keeps ids 1 and 2, each with half of the mass.
  const std::vector<float> row = {0.0f, 5.0f, 5.0f, 5.0f};
  EXPECT_EQ(draws(row, params(1.0f, 2), {0.0, 0.49, 0.51, 0.999}), (std::vector<int32_t>{1, 1, 2, 2}));
}

// The truncated, renormalised softmax of one row in double precision, by the definition in ops.h.
std::vector<double> reference_distribution(const std::vector<float>& row, const SampleRow& p) {
  const size_t n = row.size();
  std::vector<double> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<double>(row[i]) / p.temperature;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
  const double m = s[order[0]];
  const size_t k = p.top_k > 0 && static_cast<size_t>(p.top_k) < n ? static_cast<size_t>(p.top_k) : n;
  double top_k_mass = 0;
  for (size_t j = 0; j < k; ++j) top_k_mass += std::exp(s[order[j]] - m);
  size_t keep = 0;
  double prefix = 0;
  while (keep < k) {
    prefix += std::exp(s[order[keep++]] - m);
    if (prefix >= p.top_p * top_k_mass) break;
  }
  std::vector<double> prob(n, 0.0);
  for (size_t j = 0; j < keep; ++j) prob[order[j]] = std::exp(s[order[j]] - m) / prefix;
  return prob;
}

TEST(Sample, DistributionOverManyUniformsIsTheTruncatedSoftmax) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> row(64);
  for (auto& v : row) v = std::min(core::round_to_bf16(nd(rng)), 2.0f);
  for (int j = 0; j < 8; ++j) row[50 + j] = 3.0f + 0.5f * j;
  row[7] = row[20] = row[33] = 2.5f;  // ranks 9, 10, 11: top_k 10 keeps ids 7 and 20, not 33
  // Evenly spaced uniforms: each token is drawn for a share of them equal to its probability,
  // up to one uniform.
  constexpr int kDraws = 100000;
  std::vector<double> us(kDraws);
  for (int i = 0; i < kDraws; ++i) us[i] = (i + 0.5) / kDraws;
  for (const SampleRow& p :
       {params(1.0f), params(0.7f, 20), params(1.0f, 10), params(1.2f, 0, 0.8f), params(0.9f, 10, 0.97f)}) {
    const auto want = reference_distribution(row, p);
    std::vector<double> got(row.size(), 0.0);
    for (int32_t id : draws(row, p, us)) got[static_cast<size_t>(id)] += 1.0 / kDraws;
    for (size_t i = 0; i < row.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 3e-5) << "token " << i << ", temperature " << p.temperature << ", top_k " << p.top_k
                                         << ", top_p " << p.top_p;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Sample, BadArgumentsAreErrorsNamingTheParameter) {
  ops::cpu::CpuOps cpu;
  const std::vector<float> v(8, 0.0f);
  Tensor x = cpu.from_host_f32({2, 4}, v.data());
  Tensor ids = cpu.empty_i32({2});
  auto call = [&](SampleRow bad, Tensor* lp = nullptr) {
    return error_of([&] {
      const std::vector<SampleRow> rows = {params(1.0f), bad};
      cpu.sample(x, rows, ids, lp);
    });
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float t : {-1.0f, nan, kInf, 1e-40f}) {
    const std::string e = call(params(t));
    EXPECT_NE(e.find("row 1: temperature"), std::string::npos) << t << ": " << e;
  }
  for (float top_p : {0.0f, -0.5f, 1.5f, nan}) {
    const std::string e = call(params(1.0f, 0, top_p));
    EXPECT_NE(e.find("row 1: top_p"), std::string::npos) << top_p << ": " << e;
  }
  for (double u : {1.0, -0.1, std::nan("")}) {
    const std::string e = call(params(1.0f, 0, 1.0f, u));
    EXPECT_NE(e.find("row 1: uniform"), std::string::npos) << u << ": " << e;
  }
  Tensor bad_lp = cpu.empty({3});
  EXPECT_NE(call(params(1.0f), &bad_lp).find("logprob_out"), std::string::npos);
  Tensor f32_ids = cpu.empty({2});
  EXPECT_NE(error_of([&] {
              const std::vector<SampleRow> rows = {params(1.0f), params(1.0f)};
              cpu.sample(x, rows, f32_ids, nullptr);
            }).find("ids_out"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              const std::vector<SampleRow> rows = {params(1.0f)};
              cpu.sample(x, rows, ids, nullptr);
            }).find("1 rows of parameters for 2 rows of logits"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
