// The memory plan against the device at the sizes users run (issue 16): real-size checkpoints from
// `tessera make-checkpoint`, 1 GB to 35 GB, each run through `bench offline` with default flags, which
// prints the plan's predicted device memory after load and a full batch next to the measured memory
// (total - free); they must agree within 3%. 100 GB does not fit the GPU machine's 64 GB disk next to
// the others; 35 GB is the largest written. Skips itself without a GPU; each checkpoint is written to
// the temp dir and removed after its run, and one that would not fit on that disk fails the test
// naming the sizes (a skip would hide the real-size check).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct SizedCheckpoint {
  const char* name;
  const char* make_args;  // after `make-checkpoint`
  double approx_gb;       // what it writes, for the disk-space check
};

class MemoryPlanCuda : public ::testing::TestWithParam<SizedCheckpoint> {};

TEST_P(MemoryPlanCuda, MeasuredWithinThreePercentOfThePlan) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const SizedCheckpoint& c = GetParam();
  const fs::path dir = test::make_temp_dir("tessera-memplan");
  const double free_gb = static_cast<double>(fs::space(dir).available) / 1e9;
  ASSERT_GT(free_gb, c.approx_gb * 1.05) << dir << " has " << free_gb << " GB free; the checkpoint needs about "
                                         << c.approx_gb << " GB";
  int rc = 0;
  const std::string tokenizer = (test::fixtures_dir() / "tokenizers" / "deepseek-v3").string();
  std::string out = test::tessera(
      std::string("make-checkpoint ") + c.make_args + " --tokenizer " + tokenizer + " --out " + (dir / "ckpt").string(),
      &rc);
  ASSERT_EQ(rc, 0) << out;
  out = test::tessera("bench offline --device cuda --model " + (dir / "ckpt").string() +
                          " --input-len 1024 --output-len 4 --num-requests 64",
                      &rc);
  fs::remove_all(dir);
  ASSERT_EQ(rc, 0) << out;
  // "plan predicted 128840 MiB on the device (...); measured 128843 MiB, +0.0%"
  const std::regex line(R"(plan predicted (\d+) MiB on the device .*; measured (\d+) MiB)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, line)) << out;
  const double predicted = std::stod(m[1]), measured = std::stod(m[2]);
  std::printf("[ memory ] %s: plan %.0f MiB, measured %.0f MiB (%+.2f%%)\n", c.name, predicted, measured,
              100 * (measured - predicted) / predicted);
  EXPECT_LE(std::abs(measured - predicted), 0.03 * predicted)
      << c.name << ": measured " << measured << " MiB, plan " << predicted << " MiB\n"
      << out;
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, MemoryPlanCuda,
    ::testing::Values(
        // ~1 GB: DeepSeek-V3 FP8-block layout at reduced width.
        SizedCheckpoint{"deepseek_v3_fp8_1gb",
                        "--like deepseek-v3-fp8 --layers 6 --experts 16 --hidden 2048 --vocab 32000 --heads 16 "
                        "--moe-intermediate 1024 --intermediate 5632",
                        1.2},
        // ~21 GB: the issue's Kimi-K2.5-shaped bf16 checkpoint (1 dense + 3 MoE layers of 64 experts).
        SizedCheckpoint{"kimi_shaped_bf16_21gb",
                        "--like deepseek-v3-bf16 --layers 4 --experts 64 --vocab 163840 --heads 64 --first-dense 1",
                        24},
        // ~35 GB: Kimi-K2.5-NVFP4 with all 384 experts in 3 MoE layers.
        SizedCheckpoint{"kimi_k25_nvfp4_35gb", "--like kimi-k2.5-nvfp4 --layers 4 --experts 384", 36}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera
