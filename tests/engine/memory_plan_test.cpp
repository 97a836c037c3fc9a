#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/memory_plan.h"

namespace tessera::engine {
namespace {

TEST(MemoryPlan, ParsesSizes) {
  EXPECT_EQ(parse_bytes("2GiB"), 2ull * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("512MiB"), 512ull * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1.5G"), 1500000000ull);
  EXPECT_EQ(parse_bytes("1000"), 1000ull);
  EXPECT_THROW(parse_bytes("lots"), core::Error);
  EXPECT_THROW(parse_bytes("2XB"), core::Error);
}

TEST(MemoryPlan, AutoLengthIsWhatOneSequenceCanHoldCappedByTheModel) {
  MemoryPlanInput in;
  in.bytes_per_token = 1000;
  in.page_size = 64;
  in.max_position_embeddings = 4096;
  in.kv_cache_bytes = 64000 * 10 + 5;  // 10 pages and change
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.num_pages, 10);
  EXPECT_EQ(p.token_capacity, 640);
  EXPECT_EQ(p.max_model_len, 640);
  in.kv_cache_bytes = 64000ull * 100;  // 6400 tokens > 4096
  EXPECT_EQ(plan_memory(in).max_model_len, 4096);
  // A GPU backend's budget applies when no explicit size is given.
  in.kv_cache_bytes.reset();
  in.kv_budget_bytes = 64000ull * 10 + 63999;  // whole pages only
  EXPECT_EQ(plan_memory(in).num_pages, 10);
}

// A cache sharded by position over 4 ranks: the same bytes on each rank hold 4 times the tokens,
// in pages of 4 x 64 positions.
TEST(MemoryPlan, ShardedCacheHoldsTheTokensOfEveryRanksBytes) {
  MemoryPlanInput in;
  in.bytes_per_token = 1000;
  in.page_size = 64;
  in.kv_shards = 4;
  in.max_position_embeddings = 100000;
  in.kv_cache_bytes = 64000 * 10 + 5;  // 10 pages of 64 stored positions on each rank
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.num_pages, 10);
  EXPECT_EQ(p.page_tokens, 256);
  EXPECT_EQ(p.token_capacity, 2560);
  EXPECT_EQ(p.max_model_len, 2560);
  in.max_model_len = "2561";
  try {
    plan_memory(in);
    FAIL() << "2561 tokens accepted";
  } catch (const core::Error& e) {
    // 2561 tokens need 11 pages of 256 positions: 11 x 64 x 1000 bytes on each rank.
    EXPECT_NE(std::string(e.what()).find("704000"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, ExplicitLengthThatCannotFitNamesBothNumbersAndTheFlag) {
  MemoryPlanInput in;
  in.bytes_per_token = 1000;
  in.max_position_embeddings = 4096;
  in.kv_cache_bytes = 64000 * 10;
  in.max_model_len = "1000";
  try {
    plan_memory(in);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("1000"), std::string::npos) << m;
    EXPECT_NE(m.find("640"), std::string::npos) << m;
    EXPECT_NE(m.find("--kv-cache-bytes"), std::string::npos) << m;
  }
  in.max_model_len = "600";
  EXPECT_EQ(plan_memory(in).max_model_len, 600);
  in.kv_cache_bytes = 100;
  EXPECT_THROW(plan_memory(in), core::Error);
}

// --gpu-memory-utilization u: u x the device's memory, minus everything else the process holds, the
// numbers a user can check.
TEST(MemoryPlan, DeviceBudgetIsTheUsableShareMinusEverythingElse) {
  const uint64_t GiB = 1ull << 30;
  // 140 GiB device, 1 GiB in use (the CUDA context), 100 GiB of weights, 2 GiB of activations,
  // 1 GiB of runtime: 0.9 of 140 = 126, minus 104 = 22.
  EXPECT_EQ(device_kv_budget({140 * GiB, GiB, 100 * GiB, 2 * GiB, GiB}, 0.9),
            static_cast<uint64_t>(0.9 * 140 * GiB) - 104 * GiB);
  EXPECT_EQ(device_kv_budget({10 * GiB, 0, 0, 0, 0}, 1.0), 10 * GiB);
  // Nothing left: an error naming the flag and the numbers.
  try {
    (void)device_kv_budget({140 * GiB, GiB, 100 * GiB, 30 * GiB, 0}, 0.9);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--gpu-memory-utilization 0.90"), std::string::npos) << m;
    EXPECT_NE(m.find("126.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("30.00 GiB"), std::string::npos) << m;
  }
  EXPECT_THROW((void)device_kv_budget({GiB, 0, 0, 0, 0}, 0.0), core::Error);
  EXPECT_THROW((void)device_kv_budget({GiB, 0, 0, 0, 0}, 1.5), core::Error);
}

// Several ranks: the collectives' buffers (NCCL's, the one-shot slots) come out of the KV budget too,
// and the error names them when nothing is left.
TEST(MemoryPlan, DeviceBudgetCountsTheCollectives) {
  const uint64_t GiB = 1ull << 30, MiB = 1ull << 20;
  // 126 usable - (1 + 100 + 2 + 1) - 1088 MiB of collectives.
  EXPECT_EQ(device_kv_budget({140 * GiB, GiB, 100 * GiB, 2 * GiB, GiB, 1088 * MiB}, 0.9),
            static_cast<uint64_t>(0.9 * 140 * GiB) - 104 * GiB - 1088 * MiB);
  try {
    (void)device_kv_budget({140 * GiB, GiB, 100 * GiB, 2 * GiB, GiB, 23 * GiB}, 0.9);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the collectives 23.00 GiB"), std::string::npos) << m;
  }
}

// The backend's kernel tables (made at a layer's first step, after the pool is sized: the routed
// experts' descriptors and tensor maps) come out of the KV budget, and the error names them.
TEST(MemoryPlan, DeviceBudgetCountsTheKernelTables) {
  const uint64_t GiB = 1ull << 30, MiB = 1ull << 20;
  // Kimi-K2.5's 60 MoE layers x 384 experts x 3 linears x (48 B + 2 x 128 B): 20 MiB.
  const uint64_t tables = 60ull * 384 * 3 * (48 + 256);
  EXPECT_EQ(device_kv_budget({140 * GiB, GiB, 100 * GiB, 2 * GiB, GiB, 0, tables}, 0.9),
            static_cast<uint64_t>(0.9 * 140 * GiB) - 104 * GiB - tables);
  try {
    (void)device_kv_budget({140 * GiB, GiB, 100 * GiB, 2 * GiB, GiB, 0, 22 * GiB + 512 * MiB}, 0.9);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the kernel tables 22.50 GiB"), std::string::npos) << m;
  }
}

// A pool sized from the device holds no more than max_num_seqs sequences of the longest length;
// an explicit --kv-cache-bytes is taken as given.
TEST(MemoryPlan, DevicePoolIsCappedAtWhatTheSequencesCanUse) {
  MemoryPlanInput in;
  in.bytes_per_token = 1000;
  in.page_size = 64;
  in.max_position_embeddings = 1000;  // 16 pages a sequence
  in.max_num_seqs = 4;
  in.kv_budget_bytes = 64000ull * 1000;
  in.kv_budget_source = "--gpu-memory-utilization 0.90";
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.num_pages, 4 * 16);
  EXPECT_NE(p.kv_bytes_source.find("capped at what 4 sequences of 1000 tokens can use"), std::string::npos)
      << p.kv_bytes_source;
  EXPECT_EQ(p.kv_bytes_source.find("--gpu-memory-utilization 0.90"), 0u) << p.kv_bytes_source;
  in.max_model_len = "200";  // 4 pages a sequence
  EXPECT_EQ(plan_memory(in).num_pages, 4 * 4);
  in.kv_cache_bytes = 64000ull * 1000;
  EXPECT_EQ(plan_memory(in).num_pages, 1000);
}

}  // namespace
}  // namespace tessera::engine
