// The kernel registry on described GPUs (no device needed, so these run in CI): for a table of
// (device caps, shapes, --kernels), the kernel each op runs, whether it can run, and that the line
// `tessera plan` prints names the kernel the backend executes. The backend (cuda_ops.cpp) calls
// plan_mla / plan_moe with an op's shapes and runs MlaPlan::absorbed_kernel / MoePlan::grouped_for;
// these tests pin those down, with the expected kernels worked out by hand from each kernel's
// limits (kernel_registry.cpp's preference lists).
#include "ops/cuda/kernel_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/self_check.h"

namespace tessera {
namespace {

using ops::cuda::DeviceCaps;
using ops::cuda::KernelOverrides;
using ops::cuda::MlaKernel;
using ops::cuda::MlaPrefillKernel;
using ops::cuda::MlaShape;
using ops::cuda::MoeKernel;
using ops::cuda::MoeShape;

const DeviceCaps kH200{"H200", 90, 132, 227 * 1024, 0, 0};
const DeviceCaps kA100{"A100", 80, 108, 163 * 1024, 0, 0};
const DeviceCaps kRtxPro6000{"RTX PRO 6000", 120, 188, 99 * 1024, 0, 0};  // SM120: 99 KB a block
// An sm_80-class part that allows only 64 KB a block: the KV-major kernel (99 KB) does not fit, the
// heads-as-M kernel (56 KB) does. The runtime used to check shapes only and would have launched
// KV-major here while the plan printed the heads-as-M kernel.
const DeviceCaps kSmallSmem{"small-smem", 80, 40, 64 * 1024, 0, 0};

// Kimi-K2.5 (64 heads), DeepSeek-V3 (128 heads), both per rank at TP 8 (8 and 16 heads), and the
// tiny fixtures' latent 32 + rope 16.
MlaShape mla(int64_t heads, bool fp8 = false) { return {heads, 512, 64, 128, 128, fp8}; }
MlaShape tiny_mla(bool fp8) { return {8, 32, 16, 16, 24, fp8}; }
const MoeShape kKimiMoe{384, 7168, 2048};

KernelOverrides forced(const std::string& spec) { return ops::cuda::parse_kernel_overrides(spec); }

// The launcher each kernel's plan line starts with.
std::string launcher(MlaKernel k) {
  switch (k) {
    case MlaKernel::kWgmma:
      return "attend_wgmma_kernel";
    case MlaKernel::kKvMajor:
      return "attend_kv_major_kernel";
    case MlaKernel::kTensorCore:
      return "attend_mma_kernel";
    case MlaKernel::kCudaCore:
      return "attend_kernel (fp32";
  }
  return "?";
}

struct MlaCase {
  const char* what;
  DeviceCaps caps;
  MlaShape shape;
  std::string kernels;          // --kernels
  MlaKernel decode;             // expected decode kernel
  bool available;               // whether it can run
  std::string reason_has = "";  // a phrase its reason must contain
};

TEST(KernelRegistry, MlaDecodeKernelPerDeviceShapeAndOverride) {
  const std::vector<MlaCase> cases = {
      {"H200, Kimi-K2.5 64 heads", kH200, mla(64), "", MlaKernel::kWgmma, true, "64 heads in blocks of 64"},
      {"H200, DeepSeek-V3 128 heads", kH200, mla(128), "", MlaKernel::kWgmma, true},
      {"H200, 16 heads a rank: not a multiple of 64", kH200, mla(16), "", MlaKernel::kKvMajor, true,
       "passed over: wgmma"},
      {"H200, 8 heads a rank", kH200, mla(8), "", MlaKernel::kKvMajor, true},
      {"H200, 96 heads", kH200, mla(96), "", MlaKernel::kKvMajor, true, "96 heads"},
      {"H200, fp8 cache: wgmma reads bf16 only", kH200, mla(64, true), "", MlaKernel::kKvMajor, true,
       "reads a bf16 KV cache only"},
      {"A100, 64 heads", kA100, mla(64), "", MlaKernel::kKvMajor, true, "sm_90"},
      {"SM120, 16 heads fp8 within 99 KB", kRtxPro6000, mla(16, true), "", MlaKernel::kKvMajor, true,
       "94 KB shared memory of 99 KB"},
      {"SM120, 64 heads bf16", kRtxPro6000, mla(64), "", MlaKernel::kKvMajor, true, "99 KB shared memory of 99 KB"},
      {"64 KB a block: KV-major does not fit", kSmallSmem, mla(16), "", MlaKernel::kTensorCore, true,
       "needs 99 KB of shared memory, the GPU allows 64 KB"},
      {"tiny latent, fp8: no KV-major instance, mma reads bf16", kH200, tiny_mla(true), "", MlaKernel::kCudaCore, true,
       "no instance for latent 32 + rope 16"},
      {"tiny latent, bf16", kH200, tiny_mla(false), "", MlaKernel::kTensorCore, true},
      {"forced cuda-core", kH200, mla(64), "mla=cuda-core", MlaKernel::kCudaCore, true, "forced by --kernels"},
      {"forced kv-major on 64 heads", kH200, mla(64), "mla=kv-major", MlaKernel::kKvMajor, true},
      {"forced mma on an fp8 cache", kH200, mla(16, true), "mla=mma", MlaKernel::kTensorCore, false,
       "--kernels mla=mma was forced but it reads a bf16 KV cache only"},
      {"forced wgmma on 40 heads", kH200, mla(40), "mla=wgmma", MlaKernel::kWgmma, false, "40 heads"},
      {"forced wgmma on SM120", kRtxPro6000, mla(64), "mla=wgmma", MlaKernel::kWgmma, false, "sm_90"},
      {"forced kv-major on the tiny latent", kH200, tiny_mla(false), "mla=kv-major", MlaKernel::kKvMajor, false,
       "no instance for latent 32 + rope 16"},
      {"latent 1024: no kernel holds it",
       kH200,
       {16, 1024, 64, 128, 128, false},
       "",
       MlaKernel::kCudaCore,
       false,
       "no kernel can run"},
  };
  for (const MlaCase& c : cases) {
    SCOPED_TRACE(c.what);
    // A build without sm_90a code (e.g. only "90-real") has no wgmma kernel at all.
    if (c.decode == MlaKernel::kWgmma && c.available &&
        ops::cuda::compiled_architectures().find("90a") == std::string::npos)
      continue;
    const std::string arch = ops::cuda::architecture_problem(c.caps.sm);
    const ops::cuda::MlaPlan plan = ops::cuda::plan_mla(c.caps, c.shape, forced(c.kernels));
    EXPECT_EQ(plan.decode, c.decode) << plan.decode_row.kernel << " — " << plan.decode_row.reason;
    EXPECT_EQ(plan.decode_forced, !c.kernels.empty());
    if (!arch.empty()) {
      // This build carries no code for the described GPU: nothing runs there, and the plan says why.
      EXPECT_FALSE(plan.decode_row.available);
      EXPECT_EQ(plan.decode_row.reason, arch);
      continue;
    }
    EXPECT_EQ(plan.decode_row.available, c.available) << plan.decode_row.reason;
    EXPECT_NE(plan.decode_row.reason.find(c.reason_has), std::string::npos) << plan.decode_row.reason;
    // The printed line names the kernel the backend runs.
    EXPECT_EQ(plan.decode_row.kernel.rfind(launcher(plan.decode), 0), 0u) << plan.decode_row.kernel;
    // What the backend runs for a decode-only step: the plan's kernel, or the plan's refusal.
    if (c.available) {
      EXPECT_EQ(plan.absorbed_kernel(/*decode_only=*/true), c.decode);
    } else {
      try {
        (void)plan.absorbed_kernel(true);
        ADD_FAILURE() << "an unavailable kernel was handed to the backend";
      } catch (const core::Error& e) {
        EXPECT_NE(std::string(e.what()).find(plan.decode_row.reason), std::string::npos) << e.what();
      }
    }
  }
}

// Prefill chunks: the decompressed path where it has an instance; the fp32 absorbed kernel when
// mla=cuda-core is forced; a forced decode kernel also runs the absorbed path of prefill chunks.
TEST(KernelRegistry, MlaPrefillPathAndTheAbsorbedKernelOfPrefillChunks) {
  if (!ops::cuda::architecture_problem(90).empty()) GTEST_SKIP() << "this build carries no sm_90 code";
  auto p = ops::cuda::plan_mla(kH200, mla(64), {});
  EXPECT_EQ(p.prefill, MlaPrefillKernel::kDecompressed);
  EXPECT_EQ(p.prefill_row.reason.find("fp8"), std::string::npos);
  EXPECT_EQ(p.absorbed_kernel(/*decode_only=*/false), MlaKernel::kCudaCore);
  p = ops::cuda::plan_mla(kH200, mla(64, true), {});
  EXPECT_EQ(p.prefill, MlaPrefillKernel::kDecompressed);
  EXPECT_NE(p.prefill_row.kernel.find("fp8 -> bf16"), std::string::npos) << p.prefill_row.kernel;
  p = ops::cuda::plan_mla(kH200, mla(64), forced("mla=cuda-core"));
  EXPECT_EQ(p.prefill, MlaPrefillKernel::kAbsorbed);
  EXPECT_TRUE(p.prefill_row.available) << p.prefill_row.reason;
  EXPECT_NE(p.prefill_row.reason.find("forced by --kernels mla=cuda-core"), std::string::npos);
  p = ops::cuda::plan_mla(kH200, mla(64), forced("mla=kv-major"));
  EXPECT_EQ(p.prefill, MlaPrefillKernel::kDecompressed);
  EXPECT_EQ(p.absorbed_kernel(false), MlaKernel::kKvMajor);
  // qk 64 + 64 with v 256 has no prefill instance (v <= 128): the absorbed fp32 kernel.
  p = ops::cuda::plan_mla(kH200, {16, 512, 64, 64, 256, false}, {});
  EXPECT_EQ(p.prefill, MlaPrefillKernel::kAbsorbed);
  EXPECT_NE(p.prefill_row.reason.find("no tensor-core prefill instance"), std::string::npos) << p.prefill_row.reason;
}

// The plan names the prefill attention kernel that runs: Hopper's wgmma kernel for bf16-precision
// steps by default (TESSERA_MLA_PREFILL_WGMMA=0 turns it off) with sm_90a code and DeepSeek-V3's
// head dims.
TEST(KernelRegistry, MlaPrefillPlanNamesTheWgmmaKernelOnlyWhereItRuns) {
  if (!ops::cuda::architecture_problem(90).empty()) GTEST_SKIP() << "this build carries no sm_90 code";
  const auto kernel = [](const MlaShape& s) { return ops::cuda::plan_mla(kH200, s, {}).prefill_row.kernel; };
  ::setenv("TESSERA_MLA_PREFILL_WGMMA", "0", 1);
  EXPECT_EQ(kernel(mla(64)).find("wgmma"), std::string::npos) << kernel(mla(64));
  EXPECT_NE(kernel(mla(64)).find("(mma.sync;"), std::string::npos) << kernel(mla(64));
  ::unsetenv("TESSERA_MLA_PREFILL_WGMMA");
  EXPECT_EQ(kernel(mla(64)).find("Hopper wgmma in bf16") != std::string::npos, ops::cuda::has_sm90a_code())
      << kernel(mla(64));
  EXPECT_EQ(kernel(tiny_mla(false)).find("wgmma"), std::string::npos) << kernel(tiny_mla(false));
}

TEST(KernelRegistry, MoeExpertsPerShapeOverrideAndStepSize) {
  if (!ops::cuda::architecture_problem(90).empty()) GTEST_SKIP() << "this build carries no sm_90 code";
  auto p = ops::cuda::plan_moe(kH200, kKimiMoe, {});
  EXPECT_EQ(p.kernel, MoeKernel::kGrouped);
  EXPECT_TRUE(p.grouped_for(1));
  EXPECT_TRUE(p.grouped_for(ops::cuda::kGroupedMoeMaxTokens));
  EXPECT_FALSE(p.grouped_for(ops::cuda::kGroupedMoeMaxTokens + 1));  // prefill: per-expert GEMMs
  p = ops::cuda::plan_moe(kH200, kKimiMoe, forced("moe=grouped"));
  EXPECT_TRUE(p.grouped_for(4096));
  p = ops::cuda::plan_moe(kH200, kKimiMoe, forced("moe=per-expert"));
  EXPECT_EQ(p.kernel, MoeKernel::kPerExpert);
  EXPECT_FALSE(p.grouped_for(1));
  // moe_intermediate 48 is not a multiple of 32: per-expert, and forcing grouped is refused.
  p = ops::cuda::plan_moe(kH200, {8, 128, 48}, {});
  EXPECT_EQ(p.kernel, MoeKernel::kPerExpert);
  EXPECT_TRUE(p.row.available);
  EXPECT_NE(p.row.reason.find("passed over: grouped (hidden 128 / moe_intermediate 48"), std::string::npos)
      << p.row.reason;
  p = ops::cuda::plan_moe(kH200, {8, 128, 48}, forced("moe=grouped"));
  EXPECT_FALSE(p.row.available);
  EXPECT_THROW((void)p.grouped_for(1), core::Error);
}

// plan_kernels is what `tessera plan` prints: its MLA and MoE choices are the ones the backend's
// calls of plan_mla / plan_moe make, and a plan with an unavailable line is not ok.
TEST(KernelRegistry, PrintedPlanIsTheBackendsChoice) {
  for (const DeviceCaps& caps : {kH200, kA100, kRtxPro6000, kSmallSmem})
    for (const MlaShape& shape : {mla(8), mla(64), mla(128, true), tiny_mla(false), tiny_mla(true)})
      for (const std::string spec : {"", "mla=kv-major", "mla=wgmma,moe=per-expert", "moe=grouped"}) {
        SCOPED_TRACE(caps.name + " " + std::to_string(shape.heads) + " heads, --kernels '" + spec + "'");
        const auto plan = ops::cuda::plan_kernels(caps, shape, kKimiMoe, forced(spec));
        const auto mla = ops::cuda::plan_mla(caps, shape, forced(spec));
        const auto moe = ops::cuda::plan_moe(caps, kKimiMoe, forced(spec));
        EXPECT_EQ(plan.mla.decode, mla.decode);
        EXPECT_EQ(plan.mla.prefill, mla.prefill);
        EXPECT_EQ(plan.moe.kernel, moe.kernel);
        bool all = true;
        int decode_rows = 0;
        for (const auto& row : plan.rows) {
          all &= row.available;
          if (row.op == "mla decode") {
            ++decode_rows;
            EXPECT_EQ(row.kernel, mla.decode_row.kernel);
            EXPECT_EQ(row.available, mla.decode_row.available);
          }
        }
        EXPECT_EQ(decode_rows, 1);
        EXPECT_EQ(plan.ok(), all);
      }
}

TEST(KernelOverrides, ParsesAndRefusesByName) {
  auto o = ops::cuda::parse_kernel_overrides("mla=mma, moe=grouped");
  EXPECT_EQ(o.mla, MlaKernel::kTensorCore);
  EXPECT_EQ(o.moe, MoeKernel::kGrouped);
  EXPECT_EQ(ops::cuda::parse_kernel_overrides("mla=wgmma").mla, MlaKernel::kWgmma);
  EXPECT_EQ(ops::cuda::parse_kernel_overrides("mla=cuda-core").mla, MlaKernel::kCudaCore);
  EXPECT_EQ(ops::cuda::parse_kernel_overrides("moe=per-expert").moe, MoeKernel::kPerExpert);
  EXPECT_EQ(ops::cuda::parse_kernel_overrides(""), KernelOverrides{});
  EXPECT_EQ(ops::cuda::parse_kernel_overrides("mla=auto,moe=auto"), KernelOverrides{});
  for (const auto& [spec, needle] : std::vector<std::pair<std::string, std::string>>{
           {"mla", "expected op=kernel"},
           {"attn=mma", "unknown op 'attn'"},
           {"moe=fast", "kernel 'fast' for op 'moe' is not one of auto, grouped, per-expert"},
           {"mla=wgmma,,moe=grouped", "an empty item"},
           {"mla=wgmma,", "an empty item"},
           {"mla=wgmma,mla=kv-major", "op 'mla' is given twice"}}) {
    try {
      (void)ops::cuda::parse_kernel_overrides(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// The other choices a plan line lists are exactly the kernels that can run in its place: forcing
// each gives a runnable line, and a runnable kernel is never left out. The start-up self-check
// suggests them when the chosen kernel disagrees with the CPU reference.
TEST(KernelRegistry, AlternativesAreTheOtherKernelsThatCanRun) {
  for (const auto& [caps, shape] : std::vector<std::pair<DeviceCaps, MlaShape>>{{kH200, mla(64)},
                                                                                {kH200, mla(64, true)},
                                                                                {kA100, mla(16)},
                                                                                {kRtxPro6000, mla(16, true)},
                                                                                {kSmallSmem, mla(64)},
                                                                                {kH200, tiny_mla(false)}}) {
    SCOPED_TRACE(caps.name + " " + std::to_string(shape.heads) + " heads" + (shape.fp8_cache ? " fp8" : ""));
    const auto plan = ops::cuda::plan_mla(caps, shape, {});
    for (MlaKernel k : {MlaKernel::kWgmma, MlaKernel::kKvMajor, MlaKernel::kTensorCore, MlaKernel::kCudaCore}) {
      const std::string entry = "mla=" + std::string(ops::cuda::kernel_flag_name(k));
      const bool listed = std::find(plan.decode_row.alternatives.begin(), plan.decode_row.alternatives.end(), entry) !=
                          plan.decode_row.alternatives.end();
      const bool runs = ops::cuda::plan_mla(caps, shape, forced(entry)).decode_row.available;
      EXPECT_EQ(listed, runs && k != plan.decode) << entry;
    }
  }
  // Hopper at 64 heads: wgmma, with every other kernel as a choice; fp8 leaves out the bf16-only ones.
  EXPECT_EQ(ops::cuda::plan_mla(kH200, mla(64), {}).decode_row.alternatives,
            (std::vector<std::string>{"mla=kv-major", "mla=mma", "mla=cuda-core"}));
  EXPECT_EQ(ops::cuda::plan_mla(kH200, mla(64, true), {}).decode_row.alternatives,
            (std::vector<std::string>{"mla=cuda-core"}));
  // A forced kernel lists the others, the registry's choice among them.
  EXPECT_EQ(ops::cuda::plan_mla(kH200, mla(64), forced("mla=cuda-core")).decode_row.alternatives,
            (std::vector<std::string>{"mla=wgmma", "mla=kv-major", "mla=mma"}));
  // Prefill: the decompressed kernel, avoided by mla=cuda-core (the absorbed fp32 path).
  EXPECT_EQ(ops::cuda::plan_mla(kH200, mla(64), {}).prefill_row.alternatives,
            (std::vector<std::string>{"mla=cuda-core"}));
  EXPECT_TRUE(ops::cuda::plan_mla(kH200, mla(64), forced("mla=cuda-core")).prefill_row.alternatives.empty());
  EXPECT_EQ(ops::cuda::plan_moe(kH200, kKimiMoe, {}).row.alternatives, (std::vector<std::string>{"moe=per-expert"}));
  EXPECT_EQ(ops::cuda::plan_moe(kH200, kKimiMoe, forced("moe=per-expert")).row.alternatives,
            (std::vector<std::string>{"moe=grouped"}));
}

// Every plan line the self-check names for a failing op (model::plan_row_of) is a line of the CUDA
// plan, so its message always carries the kernel.
TEST(KernelRegistry, TheSelfCheckNamesLinesOfThePlan) {
  const auto plan = ops::cuda::plan_kernels(kH200, mla(64), kKimiMoe, {});
  auto has = [&](const std::string& op) {
    return std::any_of(plan.rows.begin(), plan.rows.end(), [&](const auto& r) { return r.op == op; });
  };
  for (const char* op :
       {"embedding", "rms_norm", "add_rms_norm", "linear", "linear_pair", "rms_norm_linear", "mla_prepare",
        "kv_cache_write", "rope_inplace", "mla_attention", "moe_route", "moe_experts", "moe"})
    for (const char* output : {"out", "routing", "experts"})
      for (bool decode : {false, true}) {
        ops::OpCheck c;
        c.op = op;
        c.output = output;
        c.decode_only = decode;
        const std::string row = model::plan_row_of(c);
        EXPECT_FALSE(row.empty()) << op;
        EXPECT_TRUE(has(row)) << op << " -> '" << row << "' is not a line of the plan";
      }
}

}  // namespace
}  // namespace tessera
