// Ops::sample on the GPU against the CPU reference, on random logits of many shapes and kinds
// (spread, bf16 ties, integer logits with huge tie classes, constant rows, masked tokens, NaN,
// +inf) with mixed parameters per row. Both backends share sampling_rule.h's integer arithmetic,
// so ids are expected to be equal; a mismatch is tolerated only where the uniform lies within 1e-6
// of a boundary of the distribution (or top-p is within 1e-6 of a prefix mass), which the test
// detects in double precision and reports. Skips itself without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <cstdlib>
#include <random>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/sampling/sampling.h"
#include "support/require_gpu.h"

namespace tessera {
namespace {

using core::Tensor;
using ops::SampleRow;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Whether the row's token could differ between two exact-enough implementations: the uniform
// within `eps` of a cumulative boundary of the kept distribution (id order), or top_p within
// `eps` of a prefix mass (the kept set itself is then a matter of rounding). Double precision.
bool near_boundary(const float* x, int64_t n, const SampleRow& p, double eps = 1e-6) {
  if (p.temperature == 0.0f) return false;
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    s[i] = std::isnan(x[i]) ? -INFINITY : static_cast<double>(x[i] * (1.0f / p.temperature));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  const double m = s[order[0]];
  if (m == -INFINITY) return false;
  auto w = [&](int64_t i) { return s[i] == m ? 1.0 : std::exp(s[i] - m); };
  const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
  double top_k_mass = 0;
  for (int64_t j = 0; j < k; ++j) top_k_mass += w(order[j]);
  int64_t keep = k;
  bool ambiguous = false;
  if (p.top_p < 1.0f) {
    double prefix = 0;
    for (keep = 0; keep < k;) {
      prefix += w(order[keep++]);
      if (std::abs(prefix / top_k_mass - p.top_p) < eps) ambiguous = true;
      if (prefix >= p.top_p * top_k_mass) break;
    }
  }
  std::vector<bool> kept(static_cast<size_t>(n), false);
  double kept_mass = 0;
  for (int64_t j = 0; j < keep; ++j) {
    kept[order[j]] = true;
    kept_mass += w(order[j]);
  }
  double c = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept[i]) continue;
    c += w(i) / kept_mass;
    if (std::abs(c - p.uniform) < eps) return true;
  }
  return ambiguous;
}

class SamplingCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
    gpu_ = ops::cuda::make_cuda_ops();
  }

  // One row of logits of kind `kind`.
  std::vector<float> random_row(int64_t n, int kind) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> pos(0, n - 1);
    std::vector<float> row(static_cast<size_t>(n));
    switch (kind) {
      case 0:  // spread like real logits, bf16-rounded (ties)
        for (auto& v : row) v = core::round_to_bf16(3.0f * nd(rng_));
        break;
      case 1:  // wide spread, fp32
        for (auto& v : row) v = 8.0f * nd(rng_);
        break;
      case 2:  // integer logits: a few huge classes of ties
        for (auto& v : row) v = std::round(2.0f * nd(rng_));
        break;
      case 3:  // constant: every token tied
        std::fill(row.begin(), row.end(), 1.5f);
        break;
      case 4:  // one dominant token, a tied maximum far apart, masked tokens
        for (auto& v : row) v = nd(rng_);
        for (int j = 0; j < n / 10; ++j) row[pos(rng_)] = -kInf;
        row[pos(rng_)] = 12.0f;
        row[pos(rng_)] = 12.0f;
        break;
      case 7:  // like a model's: a wide body and a few likely tokens
        for (auto& v : row) v = 2.5f * nd(rng_);
        for (int j = 0; j < 16; ++j) row[pos(rng_)] = 10.0f + std::abs(4.0f * nd(rng_));
        break;
      default:  // NaN and +inf
        for (auto& v : row) v = nd(rng_);
        row[pos(rng_)] = std::numeric_limits<float>::quiet_NaN();
        if (kind == 6) row[pos(rng_)] = kInf;
        break;
    }
    return row;
  }

  SampleRow random_params(int64_t n) {
    const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f};
    const int32_t ks[] = {0, 1, 5, 50, 1000, static_cast<int32_t>(n), static_cast<int32_t>(n) + 7, -1};
    const float ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 1e-3f, 1.0f};
    std::uniform_real_distribution<double> u(0.0, 1.0);
    SampleRow p;
    p.temperature = temps[rng_() % 5];
    p.top_k = ks[rng_() % 8];
    p.top_p = ps[rng_() % 6];
    const uint64_t edge = rng_() % 20;
    p.uniform = edge == 0 ? 0.0 : edge == 1 ? std::nextafter(1.0, 0.0) : u(rng_);
    return p;
  }

  void compare_shapes(const char* label);

  // Samples on both backends and compares; returns the number of tolerated boundary mismatches.
  int compare(int64_t rows, int64_t vocab, const std::vector<float>& logits, const std::vector<SampleRow>& params) {
    Tensor xc = cpu_.from_host_f32({rows, vocab}, logits.data());
    Tensor xg = gpu_->from_host_f32({rows, vocab}, logits.data());
    Tensor ic = cpu_.empty_i32({rows}), lc = cpu_.empty({rows});
    Tensor ig = gpu_->empty_i32({rows}), lg = gpu_->empty({rows});
    cpu_.sample(xc, params, ic, &lc);
    gpu_->sample(xg, params, ig, &lg);
    const auto want = cpu_.to_host_i32(ic), got = gpu_->to_host_i32(ig);
    const auto want_lp = cpu_.to_host_f32(lc), got_lp = gpu_->to_host_f32(lg);
    int tolerated = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const SampleRow& p = params[r];
      const std::string what = fmt::format("{}x{} row {} (temperature {}, top_k {}, top_p {}, uniform {})", rows, vocab,
                                           r, p.temperature, p.top_k, p.top_p, p.uniform);
      EXPECT_TRUE(got[r] >= 0 && got[r] < vocab) << what << ": id " << got[r];
      if (got[r] != want[r]) {
        if (near_boundary(logits.data() + r * vocab, vocab, p)) {
          ++tolerated;
          continue;
        }
        ADD_FAILURE() << what << ": gpu id " << got[r] << ", cpu id " << want[r];
        continue;
      }
      if (std::isinf(want_lp[r]))
        EXPECT_EQ(got_lp[r], want_lp[r]) << what;
      else
        EXPECT_NEAR(got_lp[r], want_lp[r], 1e-5) << what;
    }
    return tolerated;
  }

  std::mt19937_64 rng_{2024};
  ops::cpu::CpuOps cpu_;
  std::unique_ptr<ops::Ops> gpu_;
};

// Random rows of every kind with mixed parameters over many shapes; prints how many rows were
// tolerated at a boundary.
void SamplingCudaTest::compare_shapes(const char* label) {
  int tolerated = 0, total = 0;
  // Rows of 1 to 256 take each count of blocks a row (clusters of 8, 4, 2 on sm_90+, and 1); vocab
  // sizes not a multiple of 4 take the kernel's scalar loads.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1000},     {7, 32000},  {33, 129280}, {60, 50000},
                                                           {128, 163840}, {256, 1000}, {256, 50000}, {3, 262144},
                                                           {5, 1},        {2, 32003},  {9, 1001},    {40, 4099}};
  const ops::cuda::DeviceCaps caps = ops::cuda::query_device_caps();
  std::set<int> blocks_seen;
  for (auto [rows, vocab] : shapes) blocks_seen.insert(ops::cuda::sample_blocks_per_row(rows, caps.sm, caps.num_sms));
  if (caps.sm >= 90 && caps.num_sms >= 120) {  // H100 SXM, H200: 132
    EXPECT_EQ(blocks_seen, (std::set<int>{1, 2, 4, 8})) << caps.num_sms << " SMs";
  }
  for (auto [rows, vocab] : shapes) {
    std::vector<float> logits;
    std::vector<SampleRow> params;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = random_row(vocab, static_cast<int>(rng_() % 8));
      logits.insert(logits.end(), row.begin(), row.end());
      params.push_back(random_params(vocab));
    }
    tolerated += compare(rows, vocab, logits, params);
    total += static_cast<int>(rows);
  }
  std::printf("[ sampling ] %s: %d of %d rows differed with the uniform at a boundary\n", label, tolerated, total);
}

TEST_F(SamplingCudaTest, MatchesTheCpuReferenceOverShapesAndMixedParameters) { compare_shapes("default"); }

// The default (TESSERA_SAMPLE_FEWER_PASSES=1) takes top-p's total from the first radix pass and runs
// the last two passes over the first pass's bin in shared memory (kind 7's rows, shaped like a
// model's, keep that bin small enough; the other kinds also take the fallback over the row). The
// seven passes over the row (0) must give the same tokens too.
TEST_F(SamplingCudaTest, SevenPassesGiveTheSameTokens) {
  ::setenv("TESSERA_SAMPLE_FEWER_PASSES", "0", 1);
  compare_shapes("seven passes");
  ::unsetenv("TESSERA_SAMPLE_FEWER_PASSES");
}

TEST_F(SamplingCudaTest, TiesSpanningEveryWarpSegmentKeepTheLowestIds) {
  // A constant row: every token tied, so the kept set is ids [0, top_k) and the uniform picks
  // floor(uniform * top_k) of them; the tie ranks cross the kernel's 32 segments of ids.
  const int64_t vocab = 163840;
  const std::vector<float> row(static_cast<size_t>(vocab), -2.0f);
  std::vector<float> logits;
  std::vector<SampleRow> params;
  for (int32_t k : {1, 31, 5121, 100000, 163839}) {
    for (double u : {0.0, 0.37, 0.999}) {
      logits.insert(logits.end(), row.begin(), row.end());
      params.push_back({1.0f, k, 1.0f, u});
    }
  }
  const auto rows = static_cast<int64_t>(params.size());
  EXPECT_EQ(compare(rows, vocab, logits, params), 0);
  Tensor xg = gpu_->from_host_f32({rows, vocab}, logits.data());
  Tensor ig = gpu_->empty_i32({rows});
  gpu_->sample(xg, params, ig, nullptr);
  const auto got = gpu_->to_host_i32(ig);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(got[r], static_cast<int32_t>(params[r].uniform * params[r].top_k))
        << "top_k " << params[r].top_k << " uniform " << params[r].uniform;
}

TEST_F(SamplingCudaTest, RepeatedCallsGiveTheSameIds) {
  const int64_t rows = 64, vocab = 163840;
  std::vector<float> logits;
  std::vector<SampleRow> params;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_row(vocab, static_cast<int>(r % 3));
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(random_params(vocab));
  }
  Tensor xg = gpu_->from_host_f32({rows, vocab}, logits.data());
  Tensor a = gpu_->empty_i32({rows}), b = gpu_->empty_i32({rows});
  gpu_->sample(xg, params, a, nullptr);
  gpu_->sample(xg, params, b, nullptr);
  EXPECT_EQ(gpu_->to_host_i32(a), gpu_->to_host_i32(b));
}

TEST_F(SamplingCudaTest, BadParametersAreRejectedBeforeTheLaunch) {
  const std::vector<float> v(8, 0.0f);
  Tensor x = gpu_->from_host_f32({2, 4}, v.data());
  Tensor ids = gpu_->empty_i32({2});
  const std::vector<SampleRow> rows = {{1.0f, 0, 1.0f, 0.5}, {1.0f, 0, 1.0f, 1.0}};
  try {
    gpu_->sample(x, rows, ids, nullptr);
    ADD_FAILURE() << "uniform 1.0 was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1: uniform"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
