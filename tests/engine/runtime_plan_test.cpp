// The start-up plan (engine/runtime_plan.h): resolved from the checkpoint's config files and the
// backend before any weight is read, carried into the engine as it is, and refused when it cannot
// run. The numbers are worked out by hand from the fixture's config.json.
#include "engine/runtime_plan.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "io/model_config.h"
#include "ops/cpu/cpu_ops.h"
#include "support/test_support.h"

namespace tessera {
namespace {

bool has_line(const engine::RuntimePlan& p, const std::string& needle) {
  for (const auto& l : p.lines())
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

TEST(RuntimePlan, ResolvesBeforeLoadingAndTheEngineRunsIt) {
  const auto dir = test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4";
  ops::cpu::CpuOps backend;
  model::LoadOptions mo;
  mo.kv_cache_dtype = "fp32";
  mo.latent_norm_eps = 1e-5;
  engine::EngineSettings es;
  es.kv_cache_bytes = "1MiB";
  es.max_num_seqs = 3;
  es.max_num_batched_tokens = 100;
  const engine::RuntimePlan plan = engine::resolve_plan(dir, mo, es, backend);
  ASSERT_TRUE(plan.ok()) << plan.problems.front();
  // 3 layers x (kv_lora 32 + rope 16) x 4 bytes = 576 bytes a token; 1 MiB = 1820 tokens = 28 pages.
  EXPECT_EQ(plan.memory.num_pages, 28);
  EXPECT_EQ(plan.memory.max_model_len, 1024);  // the fixture's max_position_embeddings
  EXPECT_EQ(plan.model.kv_cache.dtype, core::KvCacheDtype::kF32);
  EXPECT_FLOAT_EQ(plan.model.config.latent_norm_eps, 1e-5f);
  EXPECT_EQ(plan.model.config.latent_norm_eps_source, "--latent-norm-eps");
  EXPECT_EQ(plan.engine.max_num_seqs, 3);
  EXPECT_EQ(plan.engine.max_num_batched_tokens, 100);
  EXPECT_EQ(plan.engine.max_model_len, 1024);
  EXPECT_TRUE(has_line(plan, "28 pages of 64 = 1792 tokens"));
  EXPECT_TRUE(has_line(plan, "latent eps   1e-05 (--latent-norm-eps)"));
  EXPECT_TRUE(has_line(plan, "plan         ok"));

  // The engine is built from the plan: its pool and limits are the plan's.
  model::LoadedModel m = model::load_model(plan.model, std::make_unique<ops::cpu::CpuOps>());
  EXPECT_FLOAT_EQ(m.config.latent_norm_eps, 1e-5f);
  const auto eng = engine::build_engine(m, plan);
  EXPECT_EQ(eng->config().max_model_len, 1024);
  EXPECT_EQ(eng->config().max_num_seqs, 3);
  EXPECT_EQ(eng->metrics().kv_pages_total, 28);
}

TEST(RuntimePlan, ProblemsAreCollectedAndTheEngineRefusesThePlan) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  ops::cpu::CpuOps backend;
  engine::EngineSettings es;
  es.max_model_len = "100000";
  const engine::RuntimePlan plan = engine::resolve_plan(dir, {}, es, backend);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.problems.front().find("--max-model-len 100000"), std::string::npos) << plan.problems.front();
  EXPECT_TRUE(has_line(plan, "NOT runnable"));
  model::LoadedModel m = model::load_model(plan.model, std::make_unique<ops::cpu::CpuOps>());
  EXPECT_THROW((void)engine::build_engine(m, plan), core::Error);
  // A bad flag is an error naming it, not a problem line.
  es.max_model_len = "auto";
  es.kv_cache_bytes = "lots";
  EXPECT_THROW((void)engine::resolve_plan(dir, {}, es, backend), core::Error);
}

TEST(RuntimePlan, NamesTheEnvironmentSwitchesInForce) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  ops::cpu::CpuOps backend;
  ::setenv("TESSERA_GEMV_LOOP", "0", 1);
  const engine::RuntimePlan plan = engine::resolve_plan(dir, {}, {}, backend);
  ::unsetenv("TESSERA_GEMV_LOOP");
  EXPECT_TRUE(has_line(plan, "environment  TESSERA_GEMV_LOOP=0 (")) << plan.lines().size();
  const engine::RuntimePlan clean = engine::resolve_plan(dir, {}, {}, backend);
  EXPECT_FALSE(has_line(clean, "TESSERA_GEMV_LOOP"));
}

// A kernel with other runnable choices says which --kernels entries select them (what the start-up
// self-check also suggests when that kernel disagrees with the CPU reference).
TEST(RuntimePlan, KernelLinesListTheOtherChoices) {
  ops::cpu::CpuOps backend;
  engine::EngineSettings es;
  es.kv_cache_bytes = "1MiB";
  engine::RuntimePlan plan =
      engine::resolve_plan(test::fixtures_dir() / "models" / "dsv3-tiny", model::LoadOptions{}, es, backend);
  EXPECT_FALSE(has_line(plan, "other choices")) << "the cpu backend has one kernel per op";
  plan.backend.kernels.push_back({"mla decode", "attend_wgmma_kernel", "sm_90", true, {"mla=kv-major", "mla=mma"}});
  EXPECT_TRUE(has_line(plan,
                       "  mla decode   ok  attend_wgmma_kernel — sm_90 (other choices: --kernels mla=kv-major, "
                       "mla=mma)"));
}

// The grouped expert kernels run every step size for quantized experts (prefill included): a full
// step holds, per token-expert pair, an fp32 output row of the hidden size and a bf16 activation row
// of the expert width. The workspace must leave room for them beside everything else, or `serve`
// would run out of device memory where `plan` said ok.
TEST(RuntimePlan, WorkspaceHoldsTheRoutedPairsOfAFullStep) {
  const io::ModelConfig moe = io::load_model_config(test::fixtures_dir() / "models" / "kimi-k2-tiny");
  ASSERT_GT(moe.n_routed_experts, 0);
  io::ModelConfig dense = moe;
  dense.n_routed_experts = 0;
  for (const int64_t tokens : {int64_t{1}, int64_t{2048}, int64_t{8192}}) {
    const uint64_t pairs = static_cast<uint64_t>(tokens * moe.num_experts_per_tok);
    const uint64_t rows =
        pairs * (4 * static_cast<uint64_t>(moe.hidden_size) + 2 * static_cast<uint64_t>(moe.moe_intermediate_size));
    EXPECT_GE(engine::activation_workspace_bytes(moe, tokens, 256),
              engine::activation_workspace_bytes(dense, tokens, 256) + rows)
        << tokens << " tokens";
  }
}

}  // namespace
}  // namespace tessera
