// The engine, unchanged, on the CUDA backend: a batch of concurrent requests (greedy and seeded
// sampling, prompts long enough to be chunked, decodes mixed with prefill chunks) runs to the end
// with every page returned, and each greedy token the GPU chose is the CPU fp32 reference's
// arg-max on the same context, up to bf16 noise. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/engine.h"
#include "model/model.h"
#include "model/sequence_runner.h"
#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera::engine {
namespace {

std::vector<int32_t> random_ids(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(2 + rng() % 998);
  return ids;
}

TEST(EngineCuda, ConcurrentRequestsFinishAndGreedyTokensAreTheReferenceArgmax) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  model::LoadOptions o;
  o.device = "cuda";
  model::LoadedModel gpu = model::load_model(dir, o);
  model::LoadedModel cpu = model::load_model(dir);
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 64;  // prompts of up to 150 tokens arrive in chunks, beside decodes
  Engine engine(*gpu.model, gpu.make_kv_cache(64), cfg);

  const int64_t kMaxTokens = 12;
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = random_ids(5 + 20 * i, 100 + static_cast<uint64_t>(i));
    r.params.max_tokens = kMaxTokens;
    r.params.ignore_eos = true;
    if (i % 2 == 0) {
      r.params.temperature = 0.0f;
    } else {
      r.params.temperature = 0.8f;
      r.params.top_p = 0.9f;
      r.params.seed = 7 + static_cast<uint64_t>(i);
    }
    requests.push_back(r);
  }
  std::vector<OutputStreamPtr> streams;
  for (const auto& r : requests) streams.push_back(engine.submit(r));
  int guard = 0;
  while (engine.step()) ASSERT_LT(++guard, 10000) << "engine does not finish";
  EXPECT_EQ(engine.leak_report(), "");

  const int64_t V = gpu.config.vocab_size;
  int checked = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::kNone;
    while (auto out = streams[i]->try_pop()) {
      if (out->token) tokens.push_back(out->token->token);
      if (out->finish != FinishReason::kNone) finish = out->finish;
    }
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), kMaxTokens) << requests[i].id;
    EXPECT_EQ(finish, FinishReason::kLength) << requests[i].id;
    for (int32_t t : tokens) EXPECT_TRUE(t >= 0 && t < V) << requests[i].id;
    if (requests[i].params.temperature != 0.0f) continue;
    // Teacher-forced on the CPU: each greedy choice must be within bf16 noise of the arg-max.
    model::SequenceRunner runner(cpu, static_cast<int64_t>(requests[i].prompt.size() + tokens.size()));
    auto logits = runner.append(requests[i].prompt, false);
    for (size_t k = 0; k < tokens.size(); ++k) {
      const float best = *std::max_element(logits.begin(), logits.end());
      EXPECT_GE(logits[static_cast<size_t>(tokens[k])], best - 0.05f * std::max(1.0f, std::abs(best)))
          << requests[i].id << " token " << k << ": the GPU chose " << tokens[k];
      ++checked;
      logits = runner.append({tokens[k]}, false);
    }
  }
  EXPECT_EQ(checked, 4 * kMaxTokens);
}

}  // namespace
}  // namespace tessera::engine
