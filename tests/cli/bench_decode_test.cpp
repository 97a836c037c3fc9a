// tessera bench decode --synthetic: builds a random-weight model of a preset's shapes, runs decode
// steps and reports per-layer time against the bytes floor; refuses bad flags by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/synthetic.h"
#include "model/tensor_parallel.h"
#include "ops/backend.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(BenchDecode, TinyPresetOnTheCpuReportsEveryBatch) {
  int rc = 0;
  std::string out =
      tessera("bench decode --synthetic tiny --device cpu --layers 2 --batch 1,3 --context 70 --steps 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("2 MoE layers"), std::string::npos) << out;
  EXPECT_NE(out.find("copy bandwidth"), std::string::npos) << out;
  for (const char* col : {"layer us", "floor us", "of floor", "tokens/s", "slope us"})
    EXPECT_NE(out.find(col), std::string::npos) << col << " missing in:\n" << out;
  EXPECT_NE(out.find("against a 1-layer twin"), std::string::npos) << out;
  // The kernel registry's plan for what it runs, in `tessera plan`'s words.
  EXPECT_NE(out.find("kernels\n"), std::string::npos) << out;
  EXPECT_NE(out.find("decode steps"), std::string::npos) << out;
  // One row per batch size: batch 1 touches exactly top-k = 4 experts.
  EXPECT_NE(out.find("     1 "), std::string::npos) << out;
  EXPECT_NE(out.find("     3 "), std::string::npos) << out;
  EXPECT_NE(out.find(" 4.0 "), std::string::npos) << out;
}

TEST(BenchDecode, Fp8KvCacheOnRequest) {
  int rc = 0;
  std::string out = tessera(
      "bench decode --synthetic tiny --device cpu --layers 1 --batch 2 --context 70 --steps 1 --kv-cache-dtype fp8",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("(fp8_e4m3)"), std::string::npos) << out;
  out = tessera("bench decode --synthetic tiny --device cpu --layers 1 --kv-cache-dtype bf16", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--kv-cache-dtype"), std::string::npos) << out;
}

TEST(BenchDecode, QuantizedWeightsRunAndAreNamed) {
  for (const char* w : {"fp8", "nvfp4"}) {
    int rc = 0;
    const std::string out =
        tessera(fmt::format("bench decode --synthetic tiny --device cpu --layers 1 --batch 2 --context 70 --steps 1 "
                            "--weights {}",
                            w),
                &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find(fmt::format("random weights in {}", w)), std::string::npos) << out;
  }
  int rc = 0;
  const std::string out = tessera("bench decode --synthetic tiny --device cpu --weights int4", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--weights 'int4'"), std::string::npos) << out;
}

// The floor counts the bytes each format stores: NVFP4 4 bits + one e4m3 scale per 16 weights, FP8
// 1 byte + one fp32 scale per 128 x 128 block; kv_b and the router stay bf16 on the device.
TEST(BenchDecode, BytesFloorCountsTheStoredFormat) {
  const auto cfg = model::synthetic_config("kimi-k2.5", 1);
  const double expert = 3.0 * 7168 * 2048, kv_b = 64.0 * 256 * 512;
  const double projections = 1536.0 * 7168 + 64.0 * 192 * 1536 + 576.0 * 7168 + 7168.0 * 64 * 128;
  const auto bf16 = model::decode_layer_bytes(cfg, 1, 0, 2, model::SyntheticFormat::kBf16);
  const auto nvfp4 = model::decode_layer_bytes(cfg, 1, 0, 2, model::SyntheticFormat::kNvfp4);
  EXPECT_NEAR(nvfp4.routed_experts, 8 * expert * (0.5 + 1.0 / 16), 1.0);  // 8 expected experts, to rounding
  EXPECT_DOUBLE_EQ(nvfp4.shared_expert, expert * 2);
  EXPECT_DOUBLE_EQ(nvfp4.attention_weights, bf16.attention_weights);
  EXPECT_DOUBLE_EQ(bf16.attention_weights, 2 * (projections + kv_b));
  const auto fp8 = model::decode_layer_bytes(cfg, 1, 0, 2, model::SyntheticFormat::kFp8);
  const double fp8_byte = 1.0 + 4.0 / (128 * 128);
  EXPECT_NEAR(fp8.routed_experts, 8 * expert * fp8_byte, 1.0);
  EXPECT_DOUBLE_EQ(fp8.shared_expert, expert * fp8_byte);
  EXPECT_DOUBLE_EQ(fp8.attention_weights, projections * fp8_byte + 2 * kv_b);
  EXPECT_DOUBLE_EQ(fp8.router, 384.0 * 7168 * 2);
}

TEST(BenchDecode, BadFlagsAreRefusedByName) {
  int rc = 0;
  std::string out = tessera("bench decode --synthetic kimi-k3 --device cpu", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--synthetic 'kimi-k3'"), std::string::npos) << out;
  out = tessera("bench decode --synthetic tiny --device cpu --batch 0", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--batch 0"), std::string::npos) << out;
  // tiny's positions end at 4096: the last of 2 warm-up + 10 timed steps after 5000 cached tokens
  // is past them, refused before the model is built.
  out = tessera("bench decode --synthetic tiny --device cpu --context 5000", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--context 5000"), std::string::npos) << out;
  EXPECT_NE(out.find("max_position_embeddings 4096 (at most --context 4083)"), std::string::npos) << out;
}

TEST(BenchDecode, DefaultContextStaysInsideThePresetsPositions) {
  // The default 8192 cached tokens do not fit tiny's 4096 positions: the default becomes the most
  // that does (4096 - 1 timed - 2 warm-up steps - 1), instead of a forward-pass error after the build.
  int rc = 0;
  const std::string out = tessera("bench decode --synthetic tiny --device cpu --steps 1", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("context 4092 per sequence"), std::string::npos) << out;
}

TEST(BenchDecode, BytesFloorOfAKimiLayer) {
  const auto cfg = model::synthetic_config("kimi-k2.5", 1);
  // Batch 1: exactly the 8 routed experts, each gate + up + down of 7168 x 2048 bf16.
  auto b = model::decode_layer_bytes(cfg, 1, 0, 2);
  EXPECT_NEAR(b.expected_experts, 8.0, 1e-9);
  EXPECT_NEAR(b.routed_experts, 8.0 * 3 * 7168 * 2048 * 2, 1.0);
  EXPECT_DOUBLE_EQ(b.shared_expert, 3.0 * 7168 * 2048 * 2);
  EXPECT_DOUBLE_EQ(b.router, 384.0 * 7168 * 2);
  EXPECT_DOUBLE_EQ(b.kv, 576.0 * 2);  // the new token's entry
  // 8192 sequences: nearly every expert is touched, never more than all 384.
  b = model::decode_layer_bytes(cfg, 8192, 1000, 1);
  EXPECT_GT(b.expected_experts, 383.9);
  EXPECT_LE(b.expected_experts, 384.0);
  EXPECT_DOUBLE_EQ(b.kv, 576.0 * 8192 * 1001);
}

// One rank of 8 on Kimi-K2.5's shapes reads its 8 heads' share of q_b, kv_b and o_proj, q_a and
// kv_a whole, 1/8 of the shared expert, and of the routed experts only the 48 it holds (at batch 1
// each is touched with probability 8/384); the KV cache whole.
TEST(BenchDecode, BytesFloorOfOneTensorParallelRank) {
  const auto cfg = model::synthetic_config("kimi-k2.5", 1);
  const model::TensorParallel tp{0, 8};
  const auto r = model::decode_layer_bytes(cfg, 1, 100, 2, model::SyntheticFormat::kNvfp4, tp);
  const double replicated = 1536.0 * 7168 + 576.0 * 7168;
  const double split = 8.0 * 192 * 1536 + 7168.0 * 8 * 128;  // 8 heads of q_b and o_proj
  const double kv_b = 8.0 * 256 * 512;
  EXPECT_DOUBLE_EQ(r.attention_weights, 2 * (replicated + split + kv_b));
  EXPECT_DOUBLE_EQ(r.shared_expert, 3.0 * 7168 * 256 * 2);
  EXPECT_DOUBLE_EQ(r.router, 384.0 * 7168 * 2);
  EXPECT_NEAR(r.expected_experts, 48.0 * 8 / 384, 1e-9);
  EXPECT_NEAR(r.routed_experts, r.expected_experts * 3 * 7168 * 2048 * (0.5 + 1.0 / 16), 1.0);
  EXPECT_DOUBLE_EQ(r.kv, 576.0 * 2 * 101);
  // Its part of the cache sharded by position over the 8 ranks: of 101 positions the first 64 (its
  // first page); of 8193, 1024 + position 8192.
  EXPECT_DOUBLE_EQ(model::decode_layer_bytes(cfg, 1, 100, 2, model::SyntheticFormat::kNvfp4, tp, {0, 8}).kv,
                   576.0 * 2 * 64);
  EXPECT_DOUBLE_EQ(model::decode_layer_bytes(cfg, 3, 8192, 2, model::SyntheticFormat::kNvfp4, tp, {0, 8}).kv,
                   576.0 * 2 * 3 * 1025);
  // 12 experts over 4 ranks: rank 3 holds experts 3, 7 and 11; over 2 ranks rank 0 holds six.
  auto small = model::synthetic_config("tiny", 1);
  small.n_routed_experts = 12;
  const double p = 1.0 - (1.0 - 4.0 / 12);  // batch 1, top-4 of 12
  EXPECT_NEAR(model::decode_layer_bytes(small, 1, 0, 2, model::SyntheticFormat::kBf16, {3, 4}).expected_experts, 3 * p,
              1e-9);
  EXPECT_NEAR(model::decode_layer_bytes(small, 1, 0, 2, model::SyntheticFormat::kBf16, {0, 2}).expected_experts, 6 * p,
              1e-9);
}

// A rank's synthetic weights have the shapes shard_weights cuts from the whole model's.
TEST(BenchDecode, SyntheticRankWeightsHaveTheShardedShapes) {
  const auto cfg = model::synthetic_config("tiny", 2);
  auto ops = ops::make_backend("cpu");
  model::RandomTensors random;  // the shapes are the test: zeros will do
  random.bf16 = [](core::Shape s, float) { return core::Tensor::zeros(core::DType::kBF16, std::move(s)); };
  random.bytes = [](core::Shape s, uint8_t, uint8_t) { return core::Tensor::zeros(core::DType::kU8, std::move(s)); };
  const model::ModelWeights whole = model::synthetic_weights(cfg, *ops, random);
  for (int size : {2, 4}) {
    for (int rank = 0; rank < size; ++rank) {
      const model::TensorParallel tp{rank, size};
      const model::ModelWeights cut = model::shard_weights(whole, cfg, tp);
      const model::ModelWeights made = model::synthetic_weights(cfg, *ops, random, model::SyntheticFormat::kBf16, tp);
      auto same = [&](const ops::LinearWeight& a, const ops::LinearWeight& b) {
        EXPECT_EQ(a.out, b.out) << a.name << " rank " << rank << " of " << size;
        EXPECT_EQ(a.in, b.in) << a.name << " rank " << rank << " of " << size;
      };
      same(cut.lm_head, made.lm_head);
      for (size_t l = 0; l < cut.layers.size(); ++l) {
        const auto &c = cut.layers[l], &m = made.layers[l];
        same(*c.attn.q_b, *m.attn.q_b);
        same(c.attn.kv_b, m.attn.kv_b);
        same(c.attn.o, m.attn.o);
        same(*c.attn.q_a, *m.attn.q_a);
        ASSERT_EQ(c.moe.experts.size(), m.moe.experts.size());
        for (size_t e = 0; e < c.moe.experts.size(); ++e) {
          EXPECT_EQ(c.moe.experts[e].held(), m.moe.experts[e].held()) << "expert " << e;
          if (c.moe.experts[e].held()) same(c.moe.experts[e].down, m.moe.experts[e].down);
        }
        same(c.moe.shared->gate, m.moe.shared->gate);
        same(c.moe.shared->down, m.moe.shared->down);
      }
    }
  }
}

TEST(BenchDecode, OneTensorParallelRankIsTimedAlone) {
  int rc = 0;
  std::string out = tessera(
      "bench decode --synthetic tiny --device cpu --layers 2 --batch 1 --context 70 --steps 2 --tensor-parallel-size 2",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rank 0 of 2 timed alone: 2 of 4 heads, 8 of 16 routed experts"), std::string::npos) << out;
  // Batch 1 touches 4 of 16 experts; rank 0 holds half of them.
  EXPECT_NE(out.find(" 2.0 "), std::string::npos) << out;
  // Its part of the cache sharded by position: of 70 positions, the first 64 (the second run of 64 is rank 1's).
  EXPECT_NE(out.find("kv cache     rank 0 of 2: "), std::string::npos) << out;
  EXPECT_NE(out.find("context 70 per sequence, 64 of it on this rank"), std::string::npos) << out;
  out = tessera(
      "bench decode --synthetic tiny --device cpu --layers 2 --batch 1 --context 70 --steps 2 --tensor-parallel-size 2 "
      "--kv-cache-whole",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("the KV cache whole on the rank (--kv-cache-whole)"), std::string::npos) << out;
  out = tessera("bench decode --synthetic tiny --device cpu --tensor-parallel-size 3", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--tensor-parallel-size 3: the model's 4 attention heads"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
