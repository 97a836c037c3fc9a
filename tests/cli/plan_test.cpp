// tessera plan: resolved before loading weights, refuses what cannot fit, and names the flag.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(Plan, CpuPlanReportsKvDtypeCapacityAndContext) {
  int rc = 0;
  const auto dir = (test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4").string();
  std::string out = tessera("plan --model " + dir + " --kv-cache-bytes 1MiB --kv-cache-dtype fp32", &rc);
  ASSERT_EQ(rc, 0) << out;
  // 3 layers x (32 + 16) x 4 bytes = 576 bytes per token; 1 MiB holds 1820 tokens = 28 pages of 64.
  EXPECT_NE(out.find("kv cache     fp32"), std::string::npos) << out;
  EXPECT_NE(out.find("576 bytes per token"), std::string::npos) << out;
  EXPECT_NE(out.find("28 pages of 64 = 1792 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("kv_cache_scheme"), std::string::npos) << out;  // the hint it overrides
  EXPECT_NE(out.find("max context  1024"), std::string::npos) << out;
}

TEST(Plan, CpuPlanOfTheCheckpointsFp8HintCountsOneBytePerElement) {
  int rc = 0;
  const auto dir = (test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4").string();
  std::string out = tessera("plan --model " + dir + " --kv-cache-bytes 1MiB", &rc);
  ASSERT_EQ(rc, 0) << out;
  // The checkpoint asks for FP8 KV and the cpu backend stores it: 3 x (32 + 16) x 1 = 144 bytes per
  // token; 1 MiB holds 7281 tokens = 113 whole pages of 64 = 7232 tokens (four times fp32's).
  EXPECT_NE(out.find("kv cache     fp8_e4m3"), std::string::npos) << out;
  EXPECT_NE(out.find("kv_cache_scheme"), std::string::npos) << out;
  EXPECT_NE(out.find("144 bytes per token"), std::string::npos) << out;
  EXPECT_NE(out.find("113 pages of 64 = 7232 tokens"), std::string::npos) << out;
}

TEST(Plan, ContextThatCannotFitIsRefusedWithTheNumbers) {
  int rc = 0;
  const auto dir = (test::fixtures_dir() / "models" / "dsv3-tiny").string();
  std::string out = tessera("plan --model " + dir + " --kv-cache-bytes 1MiB --max-model-len 4096", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("4096"), std::string::npos) << out;
  EXPECT_NE(out.find("NOT runnable"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// --tensor-parallel-size: the plan says how the model is split, and refuses a size that does not
// divide the heads (before any weight is read), naming heads and ranks.
TEST(Plan, TensorParallelSizeIsPlannedOrRefusedNamingHeadsAndRanks) {
  int rc = 0;
  const auto dir = (test::fixtures_dir() / "models" / "kimi-k2-tiny").string();  // 8 heads, 12 experts
  std::string out = test::tessera("plan --model " + dir + " --kv-cache-bytes 1MiB --tensor-parallel-size 8", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("8 ranks (threads of this process), each with 1 of 8 attention heads, 1-2 of 12 routed experts"),
            std::string::npos)
      << out;
  // auto: 1 MiB holds 1792 tokens, a whole 1024-token sequence, on every rank: the cache stays whole.
  EXPECT_NE(out.find("none: the whole cache on every rank (auto: none, the whole cache on every rank holds 1792 "
                     "tokens, so a 1024-token sequence fits"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("28 pages of 64 = 1792 tokens"), std::string::npos) << out;
  // Sharded by position on request: 1 MiB on each rank holds 8 times the tokens.
  out = test::tessera(
      "plan --model " + dir + " --kv-cache-bytes 1MiB --tensor-parallel-size 8 --kv-cache-sharding position", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("1.00 MiB on each of 8 ranks (--kv-cache-bytes), sharded by position: a rank stores 64 of every "
                     "512-token page"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("28 pages = 14336 tokens"), std::string::npos) << out;
  // auto with a pool whose whole cache cannot hold one 1024-token sequence (64 KiB: one page of 64):
  // sharded, 8 pages of 64 positions across the ranks.
  out = test::tessera("plan --model " + dir + " --kv-cache-bytes 64KiB --tensor-parallel-size 8", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("auto: position, the whole cache on every rank would hold 64 tokens, fewer than a 1024-token "
                     "sequence needs; sharded over 8 ranks it holds 512"),
            std::string::npos)
      << out;
  out = test::tessera("plan --model " + dir + " --tensor-parallel-size 8 --kv-cache-sharding heads", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--kv-cache-sharding"), std::string::npos) << out;
  out = test::tessera("plan --model " + dir + " --tensor-parallel-size 3", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("8 attention heads do not split evenly over 3 ranks"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
