// Decode steps as CUDA graphs (ops/cuda/runtime/step_graph.h): a replayed step computes what the same step
// run eagerly computes, with this step's inputs; a step whose launches differ from the recording is
// recorded again instead of replayed; an error inside a step leaves the backend usable. Skips
// itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "model/golden_util.h"
#include "model/model.h"
#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using core::Tensor;

std::vector<float> rms_norm_reference(const std::vector<float>& x, const std::vector<float>& w, int64_t rows,
                                      float eps) {
  const int64_t d = static_cast<int64_t>(w.size());
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = static_cast<float>(x[r * d + i] * inv * w[i]);
  }
  return out;
}

class StepGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
    if (!ops::cuda::step_graphs_enabled(true)) GTEST_SKIP() << "CUDA graphs are turned off in this environment";
    gpu_ = ops::cuda::make_cuda_ops();
  }
  std::vector<float> random(int64_t n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng_);
    return v;
  }
  // A "step": its input uploaded inside it (as the model uploads token ids and positions), one norm.
  Tensor norm_step(const std::vector<float>& x, const Tensor& w, float eps) {
    Tensor in = gpu_->from_host_f32({kRows, kCols}, x.data());
    Tensor out = gpu_->empty({kRows, kCols});
    gpu_->rms_norm(in, w, eps, out);
    return out;
  }
  static constexpr int64_t kRows = 4, kCols = 256;
  std::unique_ptr<ops::Ops> gpu_;
  std::mt19937 rng_{11};
};

TEST_F(StepGraphTest, ReplaysUseThisStepsInputsAndChangedLaunchesAreRecordedAgain) {
  const std::vector<float> w = random(kCols);
  Tensor d_w = gpu_->from_host_f32({kCols}, w.data());
  auto run = [&](const std::vector<float>& x, float eps) {
    Tensor out = gpu_->graphed_step(7, [&] { return norm_step(x, d_w, eps); });
    const std::vector<float> got = gpu_->to_host_f32(out);
    EXPECT_LE(test::rel_rms(got, rms_norm_reference(x, w, kRows, eps)), 1e-5) << "eps " << eps;
  };
  for (int i = 0; i < 4; ++i) run(random(kRows * kCols), 1e-6f);
  ops::cuda::StepGraphStats s = ops::cuda::step_graph_stats(*gpu_);
  EXPECT_EQ(s.eager, 1);     // first sight
  EXPECT_EQ(s.recorded, 1);  // second
  EXPECT_EQ(s.replayed, 2);  // each with its own input
  EXPECT_EQ(s.stale, 0);
  // Another epsilon is another launch argument: the graph is stale, the step is recorded again.
  run(random(kRows * kCols), 0.5f);
  run(random(kRows * kCols), 0.5f);
  s = ops::cuda::step_graph_stats(*gpu_);
  EXPECT_EQ(s.stale, 1);
  EXPECT_EQ(s.recorded, 2);
  EXPECT_EQ(s.replayed, 3);
  // Another key has a graph of its own.
  Tensor other = gpu_->graphed_step(8, [&] { return norm_step(random(kRows * kCols), d_w, 1e-6f); });
  EXPECT_EQ(ops::cuda::step_graph_stats(*gpu_).eager, 2);
}

// A step in two segments (a step boundary between two norms): when only the second part differs
// from the recording, the first is launched before the difference is seen; the step is then
// recorded again from the start, and both results are this step's.
TEST_F(StepGraphTest, ADifferenceAfterALaunchedSegmentStillGivesThisStepsResults) {
  const std::vector<float> w = random(kCols);
  Tensor d_w = gpu_->from_host_f32({kCols}, w.data());
  auto run = [&](float eps2) {
    const std::vector<float> x = random(kRows * kCols), y = random(kRows * kCols);
    Tensor first;
    Tensor second = gpu_->graphed_step(5, [&] {
      first = norm_step(x, d_w, 1e-6f);
      gpu_->step_boundary();
      return norm_step(y, d_w, eps2);
    });
    EXPECT_LE(test::rel_rms(gpu_->to_host_f32(first), rms_norm_reference(x, w, kRows, 1e-6f)), 1e-5);
    EXPECT_LE(test::rel_rms(gpu_->to_host_f32(second), rms_norm_reference(y, w, kRows, eps2)), 1e-5);
  };
  for (int i = 0; i < 3; ++i) run(1e-6f);  // eager, recorded, replayed
  run(0.25f);                              // first segment launched, then stale: recorded again
  run(0.25f);                              // replayed
  const auto s = ops::cuda::step_graph_stats(*gpu_);
  EXPECT_EQ(s.recorded, 2);
  EXPECT_EQ(s.replayed, 2);
  EXPECT_EQ(s.stale, 1);
}

TEST_F(StepGraphTest, AnErrorInsideAStepLeavesTheBackendUsable) {
  const std::vector<float> w = random(kCols);
  Tensor d_w = gpu_->from_host_f32({kCols}, w.data());
  Tensor table = gpu_->from_host_f32({4, kCols}, random(4 * kCols).data());
  auto step = [&](int32_t id) {
    return gpu_->graphed_step(3, [&] {
      std::vector<int32_t> ids = {id};
      Tensor out = gpu_->empty({1, kCols});
      gpu_->embedding(table, ids, out);
      return out;
    });
  };
  (void)step(1);                        // eager
  (void)step(2);                        // recorded
  EXPECT_THROW(step(99), core::Error);  // replay refused by the id check
  (void)step(3);                        // replayed
  const auto s = ops::cuda::step_graph_stats(*gpu_);
  EXPECT_EQ(s.recorded, 1);
  EXPECT_EQ(s.replayed, 1);
  // The stream is not left capturing: plain work still runs.
  const std::vector<float> x = random(kRows * kCols);
  EXPECT_LE(test::rel_rms(gpu_->to_host_f32(norm_step(x, d_w, 1e-6f)), rms_norm_reference(x, w, kRows, 1e-6f)), 1e-5);
}

// A fixture model's decode steps, replayed as graphs, against the same steps without graphs: the same
// kernels on the same inputs, so the logits agree to the last bits, over batch sizes that come and go
// and contexts that grow across the attention's split-count boundaries.
TEST(StepGraphModel, GraphedDecodeStepsGiveTheEagerLogits) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  if (!ops::cuda::step_graphs_enabled(true)) GTEST_SKIP() << "CUDA graphs are turned off in this environment";
  const auto dir = test::fixtures_dir() / "models" / "kimi-k2-tiny";
  model::LoadOptions o;
  o.device = "cuda";
  model::LoadedModel graphed = model::load_model(dir, o);
  o.enforce_eager = true;
  model::LoadedModel eager = model::load_model(dir, o);
  constexpr int64_t kSeqs = 3, kPagesPerSeq = 4;
  model::KvCache graphed_cache = graphed.make_kv_cache(kSeqs * kPagesPerSeq);
  model::KvCache eager_cache = eager.make_kv_cache(kSeqs * kPagesPerSeq);
  const int64_t V = graphed.config.vocab_size;

  std::mt19937 rng(5);
  std::vector<int64_t> len(kSeqs);
  std::vector<int32_t> next(kSeqs);
  auto table = [&](int64_t s, int64_t tokens) {
    std::vector<int32_t> t;
    for (int64_t p = 0; p < model::pages_for_tokens(tokens); ++p)
      t.push_back(static_cast<int32_t>(s * kPagesPerSeq + p));
    return t;
  };
  // Prompts (a mixed step: never graphed) of 100-130 tokens, so that decoding crosses 128.
  model::StepBatch prefill;
  for (int64_t s = 0; s < kSeqs; ++s) {
    len[s] = 100 + 15 * s;
    for (int64_t i = 0; i < len[s]; ++i) prefill.token_ids.push_back(static_cast<int32_t>(rng() % V));
    prefill.seqs.push_back({0, len[s], table(s, len[s]), false});
  }
  auto argmax_rows = [&](const std::vector<float>& logits) {
    std::vector<int32_t> ids;
    for (size_t r = 0; r * V < logits.size(); ++r)
      ids.push_back(static_cast<int32_t>(std::max_element(logits.begin() + r * V, logits.begin() + (r + 1) * V) -
                                         (logits.begin() + r * V)));
    return ids;
  };
  {
    const auto a = graphed.model->ops().to_host_f32(graphed.model->forward(prefill, graphed_cache));
    const auto b = eager.model->ops().to_host_f32(eager.model->forward(prefill, eager_cache));
    ASSERT_EQ(a.size(), b.size());
    ASSERT_LE(test::rel_rms(a, b), 1e-6);
    next = argmax_rows(a);
  }
  // 40 decode steps; sequence 2 sits out steps 10-19 (batch 2: another graph).
  for (int step = 0; step < 40; ++step) {
    model::StepBatch batch;
    std::vector<int64_t> in_step;
    for (int64_t s = 0; s < kSeqs; ++s) {
      if (s == 2 && step >= 10 && step < 20) continue;
      batch.token_ids.push_back(next[s]);
      batch.seqs.push_back({len[s], 1, table(s, len[s] + 1), false});
      in_step.push_back(s);
    }
    const auto a = graphed.model->ops().to_host_f32(graphed.model->forward(batch, graphed_cache));
    const auto b = eager.model->ops().to_host_f32(eager.model->forward(batch, eager_cache));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LE(test::rel_rms(a, b), 1e-6) << "step " << step;
    const auto ids = argmax_rows(a);
    EXPECT_EQ(ids, argmax_rows(b)) << "step " << step;
    for (size_t i = 0; i < in_step.size(); ++i) {
      next[in_step[i]] = ids[i];
      ++len[in_step[i]];
    }
  }
  const auto s = ops::cuda::step_graph_stats(graphed.model->ops());
  EXPECT_GE(s.replayed, 30) << "recorded " << s.recorded << ", stale " << s.stale << ", eager " << s.eager;
  EXPECT_GE(s.recorded, 2);  // batch 3 and batch 2
  EXPECT_EQ(ops::cuda::step_graph_stats(eager.model->ops()).replayed, 0);
}

}  // namespace
}  // namespace tessera
