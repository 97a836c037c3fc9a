// A fixture model with an fp8 KV cache (--kv-cache-dtype fp8) against the same model with the
// exact fp32 cache, on the CPU backend.
//
// What to expect: the fixtures are tiny random-weight models and chaotic (golden.json records
// rel_rms 0.015-0.05 between transformers' bf16 and fp32 runs, a 2^-9 unit roundoff everywhere);
// an e4m3 cache rounds every cached latent to 2^-4 (~0.036 rms), so the logits move more:
// measured rel_rms 0.036-0.22 over the golden prompts of the four fixtures (the longer prompts
// the larger). Tolerances: logits rel_rms <= 0.3 on every fixture; and on kimi-k25-tiny-nvfp4, the
// checkpoint that asks for FP8 KV and carries calibrated scales, the first 4 free-running greedy
// tokens equal on every prompt (measured: equal for 8 steps on 4 prompts of 5, the fifth first
// differs at step 7).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "model/golden_util.h"
#include "model/sequence_runner.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera {
namespace {

constexpr double kLogitsTol = 0.3;
constexpr int64_t kGreedySteps = 4;

model::LoadedModel load(const std::string& name, const std::string& kv) {
  model::LoadOptions o;
  o.kv_cache_dtype = kv;
  return model::load_model(test::fixtures_dir() / "models" / name, o);
}

std::vector<int32_t> prompt_of(const io::SafetensorsFile& golden, int i) {
  auto t = golden.tensor("prompt." + std::to_string(i));
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

class KvFp8ModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KvFp8ModelTest, LogitsWithinTheFp8Tolerance) {
  auto golden = io::SafetensorsFile::open(test::fixtures_dir() / "models" / GetParam() / "golden.safetensors");
  model::LoadedModel ref = load(GetParam(), "fp32"), fp8 = load(GetParam(), "fp8");
  ASSERT_EQ(fp8.kv_cache.dtype, core::KvCacheDtype::kFp8E4M3);
  for (int i = 0; golden->has("prompt." + std::to_string(i)); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto prompt = prompt_of(*golden, i);
    const double err = test::rel_rms(model::prompt_logits(fp8, prompt), model::prompt_logits(ref, prompt));
    std::printf("  %s prompt %d (%zu tokens): fp8 vs fp32 cache logits rel_rms %.4g\n", GetParam().c_str(), i,
                prompt.size(), err);
    EXPECT_GT(err, 1e-4) << "the fp8 cache changed nothing: not quantized?";
    EXPECT_LE(err, kLogitsTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvFp8ModelTest, ::testing::ValuesIn(test::kFixtureModels),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

TEST(KvFp8Model, KimiK25UsesItsCalibratedScalesAndKeepsTheGreedyTokens) {
  const std::string name = "kimi-k25-tiny-nvfp4";
  auto golden = io::SafetensorsFile::open(test::fixtures_dir() / "models" / name / "golden.safetensors");
  // The checkpoint's hint alone selects fp8 on the cpu backend.
  model::LoadedModel ref = load(name, "fp32"), fp8 = load(name, "auto");
  ASSERT_EQ(fp8.kv_cache.dtype, core::KvCacheDtype::kFp8E4M3) << fp8.kv_cache.reason;
  // self_attn.k_proj.k_scale of layers 0..2 as stored in the fixture (equal to its v_scale).
  const std::vector<float> want = {0.009634213522076607f, 0.010618139989674091f, 0.009846897795796394f};
  EXPECT_EQ(fp8.kv_scales, want);
  model::KvCache cache = fp8.make_kv_cache(2);
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(cache.layer(l).scale, want[static_cast<size_t>(l)]) << "layer " << l;
  EXPECT_EQ(ref.make_kv_cache(2).layer(0).scale, 1.0f);  // fp32 caches ignore scales
  for (int i = 0; golden->has("prompt." + std::to_string(i)); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto prompt = prompt_of(*golden, i);
    const auto greedy = test::greedy_request(prompt, kGreedySteps);
    EXPECT_EQ(test::run_engine(fp8, greedy).tokens, test::run_engine(ref, greedy).tokens);
  }
}

TEST(KvFp8Model, CheckpointWithoutScalesUsesOne) {
  model::LoadedModel fp8 = load("dsv3-tiny", "fp8");
  EXPECT_EQ(fp8.kv_scales, std::vector<float>(static_cast<size_t>(fp8.config.num_hidden_layers), 1.0f));
}

}  // namespace
}  // namespace tessera
