// tessera bench prefill: one row per prompt length with tokens/s and model FLOPs, on the CPU
// reference over a tiny fixture checkpoint; prompt lengths the plan cannot hold are refused before
// loading, by flag name.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(BenchPrefill, ReportsARowPerPromptLength) {
  int rc = 0;
  const std::string out =
      tessera("bench prefill --model " + test::fixture_model_dir("dsv3-tiny") + " --prompt-lens 8,40 --repeats 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const char* col : {"prompt", "TTFT ms", "tokens/s", "model GFLOP", "attn share", "TFLOP/s", "MFU"})
    EXPECT_NE(out.find(col), std::string::npos) << col << " missing in:\n" << out;
  EXPECT_NE(out.find("\n       8 "), std::string::npos) << out;
  EXPECT_NE(out.find("\n      40 "), std::string::npos) << out;
  EXPECT_NE(out.find("median of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("after a warm-up prompt of each length"), std::string::npos) << out;
  // No GEMM ceiling on the CPU: no MFU figure, and no ceiling line.
  EXPECT_EQ(out.find("ceiling:"), std::string::npos) << out;
}

TEST(BenchPrefill, RefusesPromptsThePlanCannotHold) {
  int rc = 0;
  std::string out =
      tessera("bench prefill --model " + test::fixture_model_dir("dsv3-tiny") + " --prompt-lens 8,10000000", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--prompt-lens 10000000"), std::string::npos) << out;
  EXPECT_NE(out.find("max_model_len"), std::string::npos) << out;
  out = tessera("bench prefill --model " + test::fixture_model_dir("dsv3-tiny") + " --prompt-lens 0", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--prompt-lens 0"), std::string::npos) << out;
  out = tessera("bench prefill --model " + test::fixture_model_dir("dsv3-tiny") + " --repeats 0", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--repeats 0"), std::string::npos) << out;
}

// --trace records CUDA kernels: on the CPU backend it is refused before loading, by flag name.
TEST(BenchPrefill, TraceNeedsTheCudaDevice) {
  int rc = 0;
  const std::string out =
      tessera("bench prefill --model " + test::fixture_model_dir("dsv3-tiny") + " --prompt-lens 8 --trace", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--trace"), std::string::npos) << out;
  EXPECT_NE(out.find("--device cuda"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
