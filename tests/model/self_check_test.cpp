// The start-up self-check (model/self_check.h) on the CPU backend, where the backend under test
// is the reference itself: unperturbed, every output of every checked op equals the reference's
// bit for bit, which shows that the checker hands the reference exactly the backend's inputs, cache
// and weights (a copy that went wrong anywhere would show as a difference); with one op made wrong
// by the test hook (ops/perturbed_ops.h), the check fails and names that op, its layer and step.
#include "model/self_check.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/perturbed_ops.h"
#include "support/test_support.h"

namespace tessera {
namespace {

// A fixture model on the CPU backend wrapped by the perturbing test hook (`op`, or "none").
model::LoadedModel load(const std::string& fixture, const std::string& op, const std::string& kv = "auto") {
  model::LoadOptions o;
  o.kv_cache_dtype = kv;
  std::unique_ptr<ops::Ops> backend = ops::make_perturbed_ops(ops::make_backend("cpu"), op);
  const model::ModelPlan plan = model::resolve_model(test::fixtures_dir() / "models" / fixture, o, *backend);
  return model::load_model(plan, std::move(backend));
}

class SelfCheckFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(SelfCheckFixture, TheReferenceAgreesWithItselfExactly) {
  for (const std::string kv : {"auto", "fp8"}) {
    SCOPED_TRACE("kv cache " + kv);
    model::LoadedModel m = load(GetParam(), "none", kv);
    const model::SelfCheckReport r = model::self_check(m);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.layers, (std::vector<int64_t>{0, 1})) << "layer 0 (dense) and the first MoE layer";
    EXPECT_EQ(r.prompt_tokens, 16);
    std::set<std::pair<std::string, std::string>> seen;  // (op, output) in (prefill, decode)
    std::set<std::string> steps;
    for (const auto& c : r.checks) {
      EXPECT_EQ(c.deviation.max_rel, 0.0)
          << c.op << " " << c.output << " layer " << c.layer << " " << c.step << ": " << c.deviation.describe();
      EXPECT_TRUE(c.problem.empty()) << c.problem;
      EXPECT_TRUE(c.layer == 0 || c.layer == 1) << c.layer;
      seen.insert({c.op, c.output});
      steps.insert(c.step);
    }
    EXPECT_EQ(steps, (std::set<std::string>{"prefill of 16 tokens", "decode of 1 token"}));
    // Every op the model runs in a dense and a MoE layer, with each of its outputs.
    for (const auto& want : std::vector<std::pair<std::string, std::string>>{{"embedding", "out"},
                                                                             {"rms_norm", "out"},
                                                                             {"linear_pair", "out1"},
                                                                             {"linear_pair", "out2"},
                                                                             {"rms_norm_linear", "out"},
                                                                             {"mla_prepare", "q"},
                                                                             {"mla_prepare", "latent"},
                                                                             {"mla_prepare", "cache"},
                                                                             {"mla_attention", "out"},
                                                                             {"linear", "out"},
                                                                             {"add_rms_norm", "residual"},
                                                                             {"add_rms_norm", "out"},
                                                                             {"silu_mul", "out"},
                                                                             {"moe", "routing"},
                                                                             {"moe", "experts"}})
      EXPECT_TRUE(seen.count(want)) << want.first << " / " << want.second << " was not checked";
    // Per step: the embedding and the input norm; in layer 0 the 5 attention ops, a norm, the dense
    // MLP's 4 ops and the next layer's norm; in layer 1 the 5 attention ops, a norm, moe and a norm.
    EXPECT_EQ(r.op_calls, 2 * (2 + 11 + 8));
    EXPECT_NE(r.summary().find("42 op calls on layers 0 and 1 (prefill of 16 tokens, decode of 1) agree with the CPU "
                               "reference (every output equal to the reference's)"),
              std::string::npos)
        << r.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelfCheckFixture, ::testing::ValuesIn(test::kFixtureModels),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

struct Perturbed {
  std::string op;      // made wrong by the test hook
  std::string output;  // the output that must fail first
  int64_t layer;
};

class SelfCheckPerturbed : public ::testing::TestWithParam<std::string> {};

TEST_P(SelfCheckPerturbed, TheWrongOpIsNamed) {
  const std::vector<Perturbed> cases = {
      {"embedding", "out", 0},
      {"rms_norm", "out", 0},
      {"linear_pair", "out1", 0},
      {"rms_norm_linear", "out", 0},
      {"mla_prepare", "q", 0},
      {"mla_attention", "out", 0},
      {"linear", "out", 0},
      {"add_rms_norm", "out", 0},
      {"silu_mul", "out", 0},
      // The block's output; and its router, which the checker runs once more to read the routing.
      {"moe", "experts", 1},
      {"moe_route", "routing", 1}};
  for (const Perturbed& p : cases) {
    SCOPED_TRACE("perturbed " + p.op);
    model::LoadedModel m = load(GetParam(), p.op);
    const model::SelfCheckReport r = model::self_check(m);
    ASSERT_FALSE(r.ok()) << r.summary();
    const std::string named = p.op == "moe_route" ? "moe" : p.op;
    EXPECT_EQ(r.failure->op, named);
    EXPECT_EQ(r.failure->output, p.output);
    EXPECT_EQ(r.failure->layer, p.layer);
    EXPECT_EQ(r.failure->step, "prefill of 16 tokens");
    EXPECT_NEAR(r.failure->deviation.max_rel, 1.0, 1e-6) << "the hook doubles the output";
    const std::string e = r.error();
    EXPECT_EQ(e.rfind("self-check failed: op " + named + " (kernel: cpu reference ops", 0), 0u) << e;
    EXPECT_NE(e.find(" on layer " + std::to_string(p.layer) + ", prefill of 16 tokens"), std::string::npos) << e;
    EXPECT_NE(e.find("differs from the CPU reference: max relative error 1 at ["), std::string::npos) << e;
    EXPECT_NE(e.find("no --kernels choice avoids this kernel; run with --skip-self-check to start anyway"),
              std::string::npos)
        << e;
  }
}

// The quantized checkpoints: FP8 block (attention and experts) and NVFP4 experts with an fp8 cache.
INSTANTIATE_TEST_SUITE_P(Fixtures, SelfCheckPerturbed, ::testing::Values("dsv3-tiny-fp8", "kimi-k25-tiny-nvfp4"),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

TEST(SelfCheck, ChecksTheLayersAskedFor) {
  // Layer 0 runs unchecked (its wrong linears go unseen), layer 1's first linear is named.
  model::LoadedModel m = load("kimi-k2-tiny", "linear");
  model::SelfCheckOptions o;
  o.layers = {1};
  o.prompt_tokens = 5;
  const model::SelfCheckReport r = model::self_check(m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure->layer, 1);
  EXPECT_EQ(r.failure->op, "linear");
  EXPECT_EQ(r.failure->weight, "model.layers.1.self_attn.o_proj");
  EXPECT_EQ(r.failure->step, "prefill of 5 tokens");
  for (const auto& c : r.checks) EXPECT_EQ(c.layer, 1);
  o.layers = {3};
  EXPECT_THROW(model::self_check(m, o), core::Error) << "kimi-k2-tiny has 3 layers";
}

TEST(SelfCheck, TheRefusalNamesTheKernelAndTheChoicesThatAvoidIt) {
  model::SelfCheckReport r;
  ops::OpCheck c;
  c.op = "mla_attention";
  c.output = "out";
  c.layer = 0;
  c.step = "decode of 1 token";
  c.decode_only = true;
  c.weight = "model.layers.0.self_attn.kv_b_proj";
  c.tolerance = 0.05;
  c.deviation.max_rel = 0.31;
  c.deviation.row = 3, c.deviation.col = 117, c.deviation.got = 2.5f, c.deviation.want = 1.5f;
  r.failure = c;
  r.kernel = "attend_wgmma_kernel";
  r.alternatives = {"mla=kv-major", "mla=cuda-core"};
  EXPECT_EQ(r.error(),
            "self-check failed: op mla_attention (kernel: attend_wgmma_kernel) on layer 0, decode of 1 token, weight "
            "model.layers.0.self_attn.kv_b_proj: differs from the CPU reference: max relative error 0.31 at [3, 117] "
            "(got 2.5, reference 1.5) > 0.05; run with --kernels mla=kv-major (or mla=cuda-core) to avoid this kernel, "
            "or --skip-self-check to start anyway");
  r.alternatives = {"moe=per-expert"};
  r.failure->problem = "token 2: expert 17 (selection score 0.1) is not among the reference's top 8";
  r.failure->output = "routing";
  EXPECT_NE(r.error().find(", output routing: differs from the CPU reference: token 2: expert 17"), std::string::npos)
      << r.error();
  EXPECT_NE(r.error().find("run with --kernels moe=per-expert to avoid this kernel"), std::string::npos) << r.error();
}

TEST(SelfCheck, PlanLineOfEachCheckedOp) {
  auto row = [](std::string op, std::string output, bool decode_only) {
    ops::OpCheck c;
    c.op = std::move(op);
    c.output = std::move(output);
    c.decode_only = decode_only;
    return model::plan_row_of(c);
  };
  EXPECT_EQ(row("mla_attention", "out", true), "mla decode");
  EXPECT_EQ(row("mla_attention", "out", false), "mla prefill");
  EXPECT_EQ(row("moe", "routing", true), "moe router");
  EXPECT_EQ(row("moe", "experts", true), "moe experts");
  EXPECT_EQ(row("moe_route", "routing", false), "moe router");
  EXPECT_EQ(row("linear_pair", "out2", false), "linear");
  EXPECT_EQ(row("rms_norm_linear", "out", false), "linear");
  EXPECT_EQ(row("add_rms_norm", "residual", false), "rms_norm");
  EXPECT_EQ(row("mla_prepare", "cache", false), "mla prepare");
  EXPECT_EQ(row("silu_mul", "out", false), "");
}

TEST(SelfCheck, PerturbableOpsAreChecked) {
  EXPECT_THROW(ops::make_perturbed_ops(ops::make_backend("cpu"), "no_such_op"), core::Error);
  EXPECT_EQ(ops::make_perturbed_ops(ops::make_backend("cpu"), "none")->name(), "cpu");
  EXPECT_EQ(ops::make_perturbed_ops(ops::make_backend("cpu"), "linear")->name(), "cpu (test hook: linear perturbed)");
}

}  // namespace
}  // namespace tessera
