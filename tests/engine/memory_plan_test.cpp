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
  // A GPU backend fills the free bytes; the fraction applies when no explicit size is given.
  in.kv_cache_bytes.reset();
  in.device_free_bytes = 64000ull * 20;
  in.memory_fraction = 0.5;
  EXPECT_EQ(plan_memory(in).num_pages, 10);
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

}  // namespace
}  // namespace tessera::engine
