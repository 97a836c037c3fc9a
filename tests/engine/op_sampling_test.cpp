// The engine's two sampling paths agree: Ops::sample (fed by op_sample_row) draws the token that
// sample_token draws from the same RNG state, and a seeded request gives the same tokens whether
// the engine sampled it on the backend or on the host.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"
#include "support/test_support.h"

namespace tessera::engine {
namespace {

TEST(OpSampling, TheOpDrawsWhatSampleTokenDrawsFromTheSameRng) {
  std::mt19937_64 gen(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  constexpr int64_t kVocab = 2000;
  std::vector<float> logits(kVocab);
  for (auto& v : logits) v = nd(gen);
  ops::cpu::CpuOps cpu;
  const core::Tensor x = cpu.from_host_f32({1, kVocab}, logits.data());
  int cases = 0;
  for (float temperature : {0.0f, 0.7f, 1.0f, 1.3f})
    for (int64_t top_k : {0, 1, 40, 2000})
      for (float top_p : {1.0f, 0.9f, 0.5f}) {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.logprobs = 0;
        ASSERT_TRUE(op_can_sample(p, SampleContext{}, kVocab));
        Rng host_rng(1000 + cases), op_rng(1000 + cases);
        ++cases;
        for (int draw = 0; draw < 100; ++draw) {
          const SampledToken want = sample_token(logits, p, SampleContext{}, host_rng);
          const ops::SampleRow row = op_sample_row(p, op_rng);
          core::Tensor id = cpu.empty_i32({1}), lp = cpu.empty({1});
          cpu.sample(x, std::span<const ops::SampleRow>(&row, 1), id, &lp);
          ASSERT_EQ(cpu.to_host_i32(id)[0], want.token)
              << "temperature " << temperature << " top_k " << top_k << " top_p " << top_p << " draw " << draw;
          EXPECT_NEAR(cpu.to_host_f32(lp)[0], want.logprob, 1e-4);
        }
        EXPECT_EQ(host_rng.uniform(), op_rng.uniform()) << "both paths used the RNG the same number of times";
      }
}

TEST(OpSampling, RowsWithHostOnlyFeaturesAreNotOfferedToTheOp) {
  SampleContext none;
  EXPECT_TRUE(op_can_sample(SamplingParams{}, none, 1000));
  auto with = [](auto change) {
    SamplingParams p;
    change(p);
    return p;
  };
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.presence_penalty = 0.5f; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.frequency_penalty = 0.5f; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.repetition_penalty = 1.1f; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.min_p = 0.1f; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.logprobs = 2; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.temperature = 1e-40f; }), none, 1000));
  EXPECT_FALSE(op_can_sample(with([](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); }),
                             none, 1000));
  EXPECT_TRUE(op_can_sample(with([](SamplingParams& p) { p.logprobs = 0; }), none, 1000));
  EXPECT_FALSE(op_can_sample(SamplingParams{}, none, ops::sampling::kMaxVocab + 1));
  const std::vector<int32_t> masked = {5};
  SampleContext ctx;
  ctx.masked = masked;
  EXPECT_FALSE(op_can_sample(SamplingParams{}, ctx, 1000));
  SampleContext forced;
  forced.forced = 7;
  EXPECT_FALSE(op_can_sample(SamplingParams{}, forced, 1000));
}

TEST(OpSampling, ASeededRequestGivesTheSameTokensOnEitherPath) {
  const model::LoadedModel loaded = model::load_model(test::fixtures_dir() / "models" / "dsv3-tiny");
  auto generate = [&](const Request& r) {
    Engine e(*loaded.model, loaded.make_kv_cache(64), EngineConfig{});
    auto stream = e.submit(r);
    while (e.step()) {
    }
    std::vector<SampledToken> out;
    while (auto o = stream->try_pop())
      if (o->token) out.push_back(*o->token);
    return out;
  };
  std::mt19937_64 gen(17);
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.id = "r";
    for (int t = 0; t < 20; ++t) r.prompt.push_back(static_cast<int32_t>(2 + gen() % 900));
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.params.temperature = i == 0 ? 0.0f : 0.6f + 0.2f * static_cast<float>(i);
    r.params.top_k = i % 2 ? 50 : 0;
    r.params.top_p = i % 3 ? 0.9f : 1.0f;
    r.params.seed = 500 + i;
    r.params.logprobs = 0;
    const auto on_op = generate(r);
    // A min_p of 1e-30 only prunes tokens below e^-69 of the most likely one, which no draw can
    // reach, but it is a host-only feature: the same request now samples on the host.
    r.params.min_p = 1e-30f;
    const auto on_host = generate(r);
    ASSERT_EQ(on_op.size(), on_host.size());
    for (size_t t = 0; t < on_op.size(); ++t) {
      ASSERT_EQ(on_op[t].token, on_host[t].token) << "request " << i << " token " << t;
      EXPECT_NEAR(on_op[t].logprob, on_host[t].logprob, 1e-4) << "request " << i << " token " << t;
    }
  }
}

}  // namespace
}  // namespace tessera::engine
