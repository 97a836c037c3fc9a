// The bench commands' GPU-only modes through the tessera binary, on a tiny fixture checkpoint.
// Skips itself without a GPU (TESSERA_REQUIRE_GPU=1 makes that a failure).
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

// Every one of `lines` appears in the command's output.
void expect_lines(const std::string& out, std::initializer_list<const char*> lines) {
  for (const char* line : lines) EXPECT_NE(out.find(line), std::string::npos) << line << " missing in:\n" << out;
}

// bench prefill --trace: after the table, one traced prompt per length, its kernels summed by name
// with the time none ran.
TEST(BenchCuda, PrefillTraceSumsTheKernelsOfEachPrompt) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  int rc = 0;
  const std::string out = tessera("bench prefill --device cuda --model " + test::fixture_model_dir("dsv3-tiny") +
                                      " --prompt-lens 8,40 --repeats 1 --skip-self-check --trace",
                                  &rc);
  ASSERT_EQ(rc, 0) << out;
  expect_lines(out, {"kernels of one 8-token prompt", "kernels of one 40-token prompt", "none running", "share ms",
                     "% busy", "calls"});
  // A kernel every prompt runs is named (the RMS norm before the first layer).
  EXPECT_NE(out.find("rms_norm"), std::string::npos) << out;
}

// bench offline --trace: the run's kernels summed by name after the usual table.
TEST(BenchCuda, OfflineTraceSumsTheRunsKernels) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  int rc = 0;
  const std::string out = tessera("bench offline --device cuda --model " + test::fixture_model_dir("dsv3-tiny") +
                                      " --num-requests 4 --input-len 8 --output-len 4 --skip-self-check --trace",
                                  &rc);
  ASSERT_EQ(rc, 0) << out;
  expect_lines(out, {"output tokens/s", "kernels of the run", "none running", "share ms", "rms_norm"});
}

// bench kernels --filter qgemv: every quantized matrix-vector shape at the four K splits, one of
// them marked as the kernel's own choice.
TEST(BenchCuda, QuantGemvRowsAtEveryKSplit) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  int rc = 0;
  const std::string out = tessera("bench kernels --device cuda --filter qgemv --iterations 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  expect_lines(out, {"qgemv t1 fp8 q_a+kv_a (one launch) 2112x7168 (slices 8)", "qgemv t1 fp8 o_proj 7168x16384",
                     "qgemv t1 nvfp4 gate+up (one launch) 4096x7168 (slices 1)"});
  EXPECT_NE(out.find(" *"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
