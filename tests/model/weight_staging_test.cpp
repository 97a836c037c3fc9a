// The staged loader (weight_staging.h) on a backend that copies its weights: every upload gets
// the checkpoint's bytes from staged memory, not the mapping, and the model computes exactly what
// the CPU reference computes from the mapping; progress goes from 0 to every byte.
#include "model/weight_staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "model/sequence_runner.h"
#include "ops/cpu/cpu_ops.h"
#include "support/copying_cpu_ops.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using core::Tensor;

using test::CopyingCpuOps;

class WeightStagingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightStagingTest, StagedUploadsComputeWhatTheMappingComputes) {
  const auto dir = test::fixtures_dir() / "models" / GetParam();
  model::LoadOptions lo;
  lo.kv_cache_dtype = "fp32";
  model::LoadedModel reference = model::load_model(dir, lo);

  auto backend = std::make_unique<CopyingCpuOps>();
  std::vector<model::LoadProgress> reports;
  const model::ModelPlan plan = model::resolve_model(dir, lo, *backend);
  auto* ops = backend.get();
  model::LoadedModel staged =
      model::load_model(plan, std::move(backend), [&](const model::LoadProgress& p) { reports.push_back(p); });
  ASSERT_GT(ops->sources.size(), 10u);
  for (const auto& [p, n] : ops->sources)
    EXPECT_FALSE(staged.checkpoint->locate(p, n).has_value()) << "an upload read the mapping, not staged bytes";

  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports.front().bytes_done, 0u);
  EXPECT_FALSE(reports.front().finished);
  EXPECT_TRUE(reports.back().finished);
  EXPECT_EQ(reports.back().bytes_done, reports.back().bytes_total);
  EXPECT_GT(reports.back().bytes_total, staged.model->weight_bytes() / 2);
  for (size_t i = 1; i < reports.size(); ++i) EXPECT_GE(reports[i].bytes_done, reports[i - 1].bytes_done);

  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7};
  EXPECT_EQ(model::prompt_logits(staged, prompt), model::prompt_logits(reference, prompt));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WeightStagingTest, ::testing::ValuesIn(test::kFixtureModels),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

}  // namespace
}  // namespace tessera
