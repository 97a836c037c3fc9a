// tessera plan --device cuda with an fp8 KV cache: the dtype, one byte per element in the memory plan,
// the kernels that read fp8, the heads-as-M kernel refused by name when forced, and whether decode
// steps run as CUDA graphs; the routed experts' kernel tables in the memory plan. Skips itself
// without a GPU.
#include <gtest/gtest.h>

#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(PlanCuda, Fp8KvCacheFromTheCheckpointsHint) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const auto dir = (test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4").string();
  int rc = 0;
  std::string out = tessera("plan --device cuda --model " + dir + " --kv-cache-bytes 1MiB", &rc);
  ASSERT_EQ(rc, 0) << out;
  // The checkpoint asks for FP8 KV and the cuda backend now stores it: 3 layers x (32 + 16) x 1 byte.
  EXPECT_NE(out.find("kv cache     fp8_e4m3"), std::string::npos) << out;
  EXPECT_NE(out.find("144 bytes per token"), std::string::npos) << out;
  EXPECT_NE(out.find("113 pages of 64 = 7232 tokens"), std::string::npos) << out;
  // Latent 32 + rope 16 has no KV-major instance, and the heads-as-M kernel reads bf16 only.
  EXPECT_NE(out.find("fp8 cache dequantized on load"), std::string::npos) << out;
  EXPECT_NE(out.find("fp8 -> bf16"), std::string::npos) << out;  // the prefill gather

  // Decode steps as CUDA graphs, unless --enforce-eager.
  EXPECT_NE(out.find("decode steps CUDA graphs"), std::string::npos) << out;

  out = tessera("plan --device cuda --model " + dir + " --kv-cache-bytes 1MiB --kv-cache-dtype bf16 --enforce-eager",
                &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("288 bytes per token"), std::string::npos) << out;
  EXPECT_NE(out.find("decode steps kernels launched one by one"), std::string::npos) << out;

  out = tessera("plan --device cuda --model " + dir + " --kv-cache-bytes 1MiB --kernels mla=mma", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("mla=mma"), std::string::npos) << out;
  EXPECT_NE(out.find("fp8"), std::string::npos) << out;
}

// The routed experts' kernel tables (made at a layer's first step, after the pool is sized) are a
// line of the memory plan: 2 MoE layers x 12 experts x 3 linears, each a 48-byte QuantMatrix and,
// with the ring kernels (sm_90a), two 128-byte tensor maps: 72 x 304 B = 21.38 KiB; 3.38 KiB without.
TEST(PlanCuda, MemoryPlanCountsTheExpertTables) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const auto dir = (test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4").string();
  int rc = 0;
  const std::string out = tessera("plan --device cuda --model " + dir + " --kv-cache-bytes 1MiB", &rc);
  ASSERT_EQ(rc, 0) << out;
  const bool ring = out.find("ring kernels' tensor maps") != std::string::npos;
  EXPECT_NE(out.find(ring ? "kernel tables 21.3" : "kernel tables 3.3"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
