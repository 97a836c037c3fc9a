// The CPU reference engine against the golden logits and greedy continuations that transformers
// (fp32, eager) produced for every fixture checkpoint (shared/fixtures/models/*/golden.safetensors).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "model/sequence_runner.h"
#include "model/golden_util.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera {
namespace {

std::vector<float> as_f32(const core::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  return v;
}
std::vector<int32_t> as_i32(const core::Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, LogitsAndGreedyMatchTransformers) {
  const auto dir = test::fixtures_dir() / "models" / GetParam();
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  // The references were computed without KV quantization: pin the exact cache (the auto rule would
  // pick fp8 for a checkpoint with an FP8 KV hint, kimi-k25-tiny-nvfp4).
  model::LoadOptions lo;
  lo.kv_cache_dtype = "fp32";
  model::LoadedModel m = model::load_model(dir, lo);
  const int64_t V = m.config.vocab_size;
  int prompts = 0;
  for (int i = 0; golden->has("prompt." + std::to_string(i)); ++i, ++prompts) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto prompt = as_i32(golden->tensor("prompt." + std::to_string(i)));
    const auto ref = as_f32(golden->tensor("logits." + std::to_string(i)));
    const auto logits = model::prompt_logits(m, prompt);
    ASSERT_EQ(logits.size(), ref.size());
    const double err = test::rel_rms(logits, ref);
    EXPECT_LE(err, 1e-4) << "rel_rms of the logits";
    std::printf("  %s prompt %d (%zu tokens): rel_rms %.3g\n", GetParam().c_str(), i, prompt.size(), err);
    for (size_t t = 0; t < prompt.size(); ++t)
      ASSERT_EQ(test::argmax_row(logits.data() + t * V, V), test::argmax_row(ref.data() + t * V, V))
          << "top-1 differs at position " << t;

    // Greedy, teacher-forced on the reference continuation: every step whose margin is above
    // 1e-3 must pick the reference token.
    const auto greedy = as_i32(golden->tensor("greedy." + std::to_string(i)));
    const auto margin = as_f32(golden->tensor("greedy_margin." + std::to_string(i)));
    model::SequenceRunner runner(m, static_cast<int64_t>(prompt.size() + greedy.size()));
    std::vector<float> step = runner.append(prompt, false);
    for (size_t k = 0; k < greedy.size(); ++k) {
      if (margin[k] > 1e-3f) {
        EXPECT_EQ(test::argmax_row(step.data(), V), greedy[k])
            << "greedy step " << k << " (margin " << margin[k] << ")";
      }
      if (k + 1 < greedy.size()) step = runner.append({greedy[k]}, false);
    }
    // Free-running greedy generation through the engine (what `tessera generate` and the server
    // run) agrees up to the first low-margin step.
    const auto r = test::run_engine(m, test::greedy_request(prompt, static_cast<int64_t>(greedy.size())));
    ASSERT_EQ(r.tokens.size(), greedy.size());
    for (size_t k = 0; k < greedy.size() && margin[k] > 1e-3f; ++k)
      ASSERT_EQ(r.tokens[k], greedy[k]) << "free-running greedy step " << k;
  }
  EXPECT_GE(prompts, 1) << "golden file has no prompts";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(test::kFixtureModels),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

}  // namespace
}  // namespace tessera
