// The start-up self-check (model/self_check.h) on the CUDA backend, the backend it exists for.
// Skips itself without a GPU (TESSERA_REQUIRE_GPU=1 makes that a failure):
// - every fixture passes, with a bf16 and an fp8 KV cache, with every MLA decode and MoE kernel
//   the plan offers for it (the largest error of each op is printed: the margin to its tolerance);
// - with an op made wrong by the test hook (ops/perturbed_ops.h) it fails, naming the op, the
//   kernel the plan runs for it and the --kernels choices that avoid it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "model/self_check.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/perturbed_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

model::LoadedModel load_cuda(const std::string& fixture, const std::string& op, const std::string& kv,
                             const std::string& kernels = "") {
  model::LoadOptions o;
  o.device = "cuda";
  o.kv_cache_dtype = kv;
  o.kernels = kernels;
  std::unique_ptr<ops::Ops> backend = ops::make_perturbed_ops(ops::make_backend("cuda", kernels), op);
  const model::ModelPlan plan = model::resolve_model(test::fixtures_dir() / "models" / fixture, o, *backend);
  return model::load_model(plan, std::move(backend));
}

// The largest deviation of each (op, output, step kind), against its tolerance.
void print_margins(const std::string& what, const model::SelfCheckReport& r) {
  std::map<std::string, std::pair<double, double>> worst;
  for (const auto& c : r.checks) {
    auto& w = worst[c.op + " " + c.output + (c.decode_only ? " (decode)" : " (prefill)")];
    w.first = std::max(w.first, c.deviation.max_rel);
    w.second = c.tolerance;
  }
  std::printf("[ self-check ] %s: %s\n", what.c_str(), r.ok() ? r.summary().c_str() : r.error().c_str());
  for (const auto& [k, v] : worst) std::printf("    %-36s %.3g (tolerance %.3g)\n", k.c_str(), v.first, v.second);
}

// The plan's line for `op`, as the self-check reads it.
ops::KernelChoice plan_line(model::LoadedModel& m, const std::string& op) {
  for (const auto& k : m.model->ops().plan(m.config, m.kv_cache.dtype).kernels)
    if (k.op == op) return k;
  return {};
}

class SelfCheckCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(SelfCheckCuda, PassesWithEveryKernelThePlanOffers) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  for (const std::string kv : {"bf16", "fp8"}) {
    // The registry's choice, then each other choice of the MLA decode, MLA prefill and MoE lines.
    model::LoadedModel m = load_cuda(GetParam(), "none", kv);
    std::vector<std::string> kernel_sets = {""};
    for (const char* op : {"mla decode", "mla prefill", "moe experts"})
      for (const auto& alt : plan_line(m, op).alternatives)
        if (std::find(kernel_sets.begin(), kernel_sets.end(), alt) == kernel_sets.end()) kernel_sets.push_back(alt);
    for (const auto& kernels : kernel_sets) {
      SCOPED_TRACE("kv " + kv + ", --kernels '" + kernels + "'");
      model::LoadedModel mk = kernels.empty() ? std::move(m) : load_cuda(GetParam(), "none", kv, kernels);
      const model::SelfCheckReport r = model::self_check(mk);
      print_margins(GetParam() + ", kv " + kv + ", --kernels '" + kernels + "'", r);
      EXPECT_TRUE(r.ok()) << r.error();
      EXPECT_EQ(r.op_calls, 42);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelfCheckCuda, ::testing::ValuesIn(test::kFixtureModels),
                         [](const auto& info) { return test::fixture_test_name(info.param); });

TEST(SelfCheckCudaPerturbed, TheWrongOpIsNamedWithItsKernel) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  struct Case {
    std::string op, plan_op;
    int64_t layer;
  };
  for (const Case& c : std::vector<Case>{{"mla_attention", "mla prefill", 0},
                                         {"rms_norm", "rms_norm", 0},
                                         {"linear", "linear", 0},
                                         {"mla_prepare", "mla prepare", 0},
                                         {"moe", "moe experts", 1}}) {
    SCOPED_TRACE(c.op);
    model::LoadedModel m = load_cuda("kimi-k25-tiny-nvfp4", c.op, "bf16");
    const model::SelfCheckReport r = model::self_check(m);
    ASSERT_FALSE(r.ok()) << r.summary();
    EXPECT_EQ(r.failure->op, c.op);
    EXPECT_EQ(r.failure->layer, c.layer);
    EXPECT_EQ(model::plan_row_of(*r.failure), c.plan_op);
    const ops::KernelChoice line = plan_line(m, c.plan_op);
    ASSERT_FALSE(line.kernel.empty()) << "no plan line '" << c.plan_op << "'";
    EXPECT_EQ(r.kernel, line.kernel);
    EXPECT_EQ(r.alternatives, line.alternatives);
    const std::string e = r.error();
    EXPECT_NE(e.find("self-check failed: op " + c.op + " (kernel: " + line.kernel + ")"), std::string::npos) << e;
    if (!line.alternatives.empty()) {
      EXPECT_NE(e.find("run with --kernels " + line.alternatives[0]), std::string::npos) << e;
    }
    std::printf("[ self-check ] perturbed %s: %s\n", c.op.c_str(), e.c_str());
  }
}

// The decode step's attention is the decode kernel's line: with an op wrong only on one-token steps
// the self-check names the decode kernel. (The hook perturbs every call, so the prefill fails first;
// checking only the decode step's layer isolates it through a prompt of one token, which is a
// decode-only step.)
TEST(SelfCheckCudaPerturbed, DecodeAttentionNamesTheDecodeKernel) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  model::LoadedModel m = load_cuda("dsv3-tiny", "mla_attention", "bf16");
  model::SelfCheckOptions o;
  o.prompt_tokens = 1;
  const model::SelfCheckReport r = model::self_check(m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.failure->decode_only);
  EXPECT_EQ(model::plan_row_of(*r.failure), "mla decode");
  EXPECT_EQ(r.kernel, plan_line(m, "mla decode").kernel);
  std::printf("[ self-check ] %s\n", r.error().c_str());
}

}  // namespace
}  // namespace tessera
