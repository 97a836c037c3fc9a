#include "ops/cuda/kernel_registry.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/env.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/mla_prefill.h"
#include "ops/cuda/runtime/cuda_check.h"

#ifndef TESSERA_CUDA_ARCHS
#define TESSERA_CUDA_ARCHS "unknown"
#endif

namespace tessera::ops::cuda {

DeviceCaps query_device_caps(int index) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    core::fail("no CUDA device is available (cudaGetDeviceCount found none)");
  }
  TESSERA_CHECK(index >= 0 && index < n, "CUDA device {} does not exist ({} found)", index, n);
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceCaps c;
  c.name = p.name;
  c.sm = p.major * 10 + p.minor;
  c.num_sms = p.multiProcessorCount;
  c.smem_per_block_optin = static_cast<int64_t>(p.sharedMemPerBlockOptin);
  // cudaMemGetInfo answers for the current device.
  int current = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  TESSERA_CUDA_CHECK(cudaSetDevice(index));
  size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  TESSERA_CUDA_CHECK(cudaSetDevice(current));
  c.free_bytes = free_b;
  c.total_bytes = total_b;
  return c;
}

std::string compiled_architectures() { return TESSERA_CUDA_ARCHS; }

std::string architecture_problem(int sm) {
  // "XY-real": machine code, runs on the same major at minor >= Y; "XYa-real": arch-specific
  // features, runs on XY only; "XY-virtual": PTX, JIT-compiled for any device >= XY.
  std::stringstream ss(compiled_architectures());
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int arch = std::atoi(item.c_str());
    if (arch <= 0) continue;
    const bool is_virtual = item.find("virtual") != std::string::npos;
    const bool arch_specific = item.find('a') != std::string::npos && item.find('a') < item.find('-');
    if (is_virtual ? sm >= arch : arch_specific ? sm == arch : (sm / 10 == arch / 10 && sm >= arch)) return "";
  }
  return fmt::format(
      "this build has no kernels for sm_{} (it carries {}); rebuild with "
      "-DCMAKE_CUDA_ARCHITECTURES={}-real",
      sm, compiled_architectures(), sm);
}

int64_t mla_mma_smem_bytes(int64_t latent, int64_t rope) {
  const int64_t stride = latent + rope + 8;
  return (16 * stride + 32 * stride + 16 * 40) * 2 + 4 * 16 * 4;
}

bool mla_kv_major_supported(int64_t latent, int64_t rope) { return mla_attend_kv_major_supported(latent, rope); }
int64_t mla_kv_major_shared_bytes(int64_t heads, int64_t latent, int64_t rope, bool fp8) {
  return mla_kv_major_smem_bytes(heads, latent, rope, fp8);
}

bool has_sm90a_code() {
  std::stringstream ss(compiled_architectures());
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.rfind("90a", 0) == 0 && item.find("virtual") == std::string::npos) return true;
  return false;
}

std::string mla_wgmma_problem(int sm, int64_t smem_per_block_optin, int64_t heads, int64_t latent, int64_t rope) {
  if (!mla_attend_wgmma_supported(latent, rope, heads))
    return fmt::format(
        "the wgmma kernel needs latent 512 + rope 64 and a multiple of 64 heads (got latent {} + rope "
        "{}, {} heads)",
        latent, rope, heads);
  if (sm != 90) return fmt::format("the wgmma kernel needs an sm_90 (Hopper) GPU, this one is sm_{}", sm);
  if (!has_sm90a_code())
    return fmt::format(
        "the wgmma kernel needs sm_90a code, this build carries {} (rebuild with "
        "-DCMAKE_CUDA_ARCHITECTURES=90a-real)",
        compiled_architectures());
  if (mla_wgmma_smem_bytes() > smem_per_block_optin)
    return fmt::format("the wgmma kernel needs {} KB of shared memory, the GPU allows {} KB",
                       mla_wgmma_smem_bytes() / 1024, smem_per_block_optin / 1024);
  return "";
}

int64_t mla_cuda_core_smem_bytes(int64_t heads, int64_t latent, int64_t rope) {
  const int64_t entry = latent + rope;
  return (32 * (entry + 1) + std::min<int64_t>(heads, 8) * entry) * 4;
}

namespace {

std::string kb(int64_t bytes) { return fmt::format("{} KB", bytes / 1024); }
std::string smem_of(int64_t need, const DeviceCaps& caps) {
  return fmt::format("{} shared memory of {}", kb(need), kb(caps.smem_per_block_optin));
}
std::string smem_problem(const char* what, int64_t need, const DeviceCaps& caps) {
  return fmt::format("{} needs {} of shared memory, the GPU allows {}", what, kb(need), kb(caps.smem_per_block_optin));
}

// A kernel the chooser may pick: why it cannot run here ("" = it can), what it is, why it fits.
template <class Kernel, class Shape>
struct Candidate {
  Kernel kernel;
  std::string (*why_not)(const DeviceCaps&, const Shape&);
  std::string (*describe)(const DeviceCaps&, const Shape&);
  std::string (*fits)(const DeviceCaps&, const Shape&);
};

// The first candidate that can run (or the forced one), as the plan's line for `op`, with the
// reasons the preferred ones were passed over.
template <class Kernel, class Shape, size_t N>
std::pair<Kernel, KernelChoice> choose(const char* op, const char* flag,
                                       const std::array<Candidate<Kernel, Shape>, N>& prefs, const DeviceCaps& caps,
                                       const Shape& shape, std::optional<Kernel> forced) {
  const std::string arch = architecture_problem(caps.sm);
  // The other candidates that can run here, as --kernels entries (what the self-check suggests when
  // the chosen kernel disagrees with the CPU reference).
  auto alternatives = [&](Kernel chosen) {
    std::vector<std::string> alt;
    for (const auto& c : prefs)
      if (arch.empty() && c.kernel != chosen && c.why_not(caps, shape).empty())
        alt.push_back(fmt::format("{}={}", flag, kernel_flag_name(c.kernel)));
    return alt;
  };
  auto row = [&](const Candidate<Kernel, Shape>& c, std::string reason, bool ok) {
    return std::pair{c.kernel, KernelChoice{op, c.describe(caps, shape), arch.empty() ? std::move(reason) : arch,
                                            ok && arch.empty(), alternatives(c.kernel)}};
  };
  if (forced) {
    for (const auto& c : prefs) {
      if (c.kernel != *forced) continue;
      const std::string problem = c.why_not(caps, shape);
      const std::string name{kernel_flag_name(c.kernel)};
      if (!problem.empty()) return row(c, fmt::format("--kernels {}={} was forced but {}", flag, name, problem), false);
      return row(c, fmt::format("forced by --kernels {}={}; {}", flag, name, c.fits(caps, shape)), true);
    }
  }
  std::string passed;
  for (const auto& c : prefs) {
    const std::string problem = c.why_not(caps, shape);
    if (problem.empty()) return row(c, c.fits(caps, shape) + (passed.empty() ? "" : "; passed over: " + passed), true);
    passed += fmt::format("{}{} ({})", passed.empty() ? "" : ", ", kernel_flag_name(c.kernel), problem);
  }
  return row(prefs.back(), "no kernel can run: " + passed, false);
}

// --- MLA decode, in order of preference.
std::string tensor_core_problem(const DeviceCaps& caps) {
  return caps.sm < 80 ? fmt::format("tensor cores need sm_80+, this GPU is sm_{}", caps.sm) : "";
}
constexpr const char* kBf16Only =
    "it reads a bf16 KV cache only, this one is fp8_e4m3 (use mla=kv-major or "
    "mla=cuda-core, or --kv-cache-dtype bf16)";

const std::array<Candidate<MlaKernel, MlaShape>, 4> kMlaDecodePrefs{{
    {MlaKernel::kWgmma,
     [](const DeviceCaps& c, const MlaShape& s) -> std::string {
       if (std::string p = mla_wgmma_problem(c.sm, c.smem_per_block_optin, s.heads, s.latent, s.rope); !p.empty())
         return p;
       return s.fp8_cache ? kBf16Only : "";
     },
     [](const DeviceCaps&, const MlaShape&) -> std::string {
       return "attend_wgmma_kernel (wgmma m64n64k16 / m64n256k16 bf16, 64 heads a block, cp.async 2 stages)";
     },
     [](const DeviceCaps& c, const MlaShape& s) {
       return fmt::format("sm_90 with sm_90a code, {} heads in blocks of 64, latent {} + rope {}, {}", s.heads,
                          s.latent, s.rope, smem_of(mla_wgmma_smem_bytes(), c));
     }},
    {MlaKernel::kKvMajor,
     [](const DeviceCaps& c, const MlaShape& s) -> std::string {
       if (std::string p = tensor_core_problem(c); !p.empty()) return p;
       if (!mla_attend_kv_major_supported(s.latent, s.rope))
         return fmt::format("no instance for latent {} + rope {} (it has 512 + 64 and 64 + 16)", s.latent, s.rope);
       const int64_t need = mla_kv_major_smem_bytes(s.heads, s.latent, s.rope, s.fp8_cache);
       return need > c.smem_per_block_optin ? smem_problem("it", need, c) : "";
     },
     [](const DeviceCaps&, const MlaShape& s) {
       return s.fp8_cache ? fmt::format(
                                "attend_kv_major_kernel (fp8 cache: cp.async of the bytes, bf16 in shared "
                                "memory, mma.sync bf16, positions x {} heads)",
                                s.heads <= 8 ? 8 : 16)
                          : fmt::format(
                                "attend_kv_major_kernel (mma.sync bf16, positions x {} heads, cp.async 2 "
                                "stages)",
                                s.heads <= 8 ? 8 : 16);
     },
     [](const DeviceCaps& c, const MlaShape& s) {
       return fmt::format("sm_{} >= 80, latent {} + rope {}, {}", c.sm, s.latent, s.rope,
                          smem_of(mla_kv_major_smem_bytes(s.heads, s.latent, s.rope, s.fp8_cache), c));
     }},
    {MlaKernel::kTensorCore,
     [](const DeviceCaps& c, const MlaShape& s) -> std::string {
       if (s.fp8_cache) return kBf16Only;
       if (std::string p = tensor_core_problem(c); !p.empty()) return p;
       if (!mla_attend_mma_supported(s.latent, s.rope))
         return fmt::format("latent {} + rope {} is not a tensor-core shape", s.latent, s.rope);
       const int64_t need = mla_mma_smem_bytes(s.latent, s.rope);
       return need > c.smem_per_block_optin ? smem_problem("it", need, c) : "";
     },
     [](const DeviceCaps&, const MlaShape&) -> std::string {
       return "attend_mma_kernel (mma.sync m16n8k16 bf16, 16 heads a block)";
     },
     [](const DeviceCaps& c, const MlaShape& s) {
       return fmt::format("sm_{} >= 80, latent {} + rope {}, {}", c.sm, s.latent, s.rope,
                          smem_of(mla_mma_smem_bytes(s.latent, s.rope), c));
     }},
    {MlaKernel::kCudaCore,
     [](const DeviceCaps& c, const MlaShape& s) -> std::string {
       if (s.latent > 512) return fmt::format("the fp32 kernel holds a latent of at most 512, not {}", s.latent);
       const int64_t need = mla_cuda_core_smem_bytes(s.heads, s.latent, s.rope);
       return need > c.smem_per_block_optin ? smem_problem("the fp32 kernel", need, c) : "";
     },
     [](const DeviceCaps&, const MlaShape& s) -> std::string {
       return s.fp8_cache ? "attend_kernel (fp32, CUDA cores; fp8 cache dequantized on load)"
                          : "attend_kernel (fp32, CUDA cores)";
     },
     [](const DeviceCaps& c, const MlaShape& s) {
       return fmt::format("fp32 on CUDA cores, {}", smem_of(mla_cuda_core_smem_bytes(s.heads, s.latent, s.rope), c));
     }},
}};

// The decompressed-K/V prefill path: a tensor-core instance for the head dims, and its shared memory.
std::string decompressed_prefill_problem(const DeviceCaps& c, const MlaShape& s) {
  if (!mla_prefill_attend_supported(s.nope, s.rope, s.v, s.latent))
    return fmt::format("no tensor-core prefill instance for qk {} + {}, v {}", s.nope, s.rope, s.v);
  if (s.heads <= 0 || s.heads > 65535) return fmt::format("{} heads do not fit its grid", s.heads);
  const int64_t need = mla_prefill_attend_smem_bytes(s.nope, s.rope, s.v, /*split=*/true);
  return need > c.smem_per_block_optin ? smem_problem("it", need, c) : "";
}

// --- MoE routed experts, in order of preference.
const std::array<Candidate<MoeKernel, MoeShape>, 2> kMoePrefs{{
    {MoeKernel::kGrouped,
     [](const DeviceCaps&, const MoeShape& s) -> std::string {
       return moe_grouped_supported(s.hidden, s.inter, s.experts)
                  ? ""
                  : fmt::format("hidden {} / moe_intermediate {} are not multiples of 32 or {} experts exceed 1024",
                                s.hidden, s.inter, s.experts);
     },
     [](const DeviceCaps&, const MoeShape& s) {
       // Over the expert-sorted pairs, experts with few pairs stream as matrix-vector products where
       // the widths allow (kernels/moe/gemv.cu), the others on grouped mma.sync kernels (kernels/moe/grouped.cu).
       return moe_gemv_supported(s.hidden, s.inter)
                  ? fmt::format(
                        "expert_gemv_kernel for experts with <= {} pairs, grouped mma.sync kernels for "
                        "heavier ones (the shared expert)",
                        kMoeGemvMaxPairs)
                  : std::string("grouped mma.sync kernels over expert-sorted pairs");
     },
     [](const DeviceCaps&, const MoeShape&) {
       return std::string(
           "decode reads each routed expert once with no host round trip, and a model's shared "
           "expert streams on a second stream while the router runs; prefill is compute-bound");
     }},
    {MoeKernel::kPerExpert, [](const DeviceCaps&, const MoeShape&) { return std::string(); },
     [](const DeviceCaps&, const MoeShape&) { return std::string("per-expert cuBLASLt GEMMs + gather/scatter"); },
     [](const DeviceCaps&, const MoeShape&) { return std::string("bf16 GEMMs, any shape"); }},
}};

}  // namespace

std::string_view kernel_flag_name(MlaKernel k) {
  switch (k) {
    case MlaKernel::kWgmma:
      return "wgmma";
    case MlaKernel::kKvMajor:
      return "kv-major";
    case MlaKernel::kTensorCore:
      return "mma";
    case MlaKernel::kCudaCore:
      return "cuda-core";
  }
  return "?";
}
std::string_view kernel_flag_name(MoeKernel k) { return k == MoeKernel::kGrouped ? "grouped" : "per-expert"; }
bool reads_fp8_cache(MlaKernel k) { return k == MlaKernel::kKvMajor || k == MlaKernel::kCudaCore; }

KernelOverrides parse_kernel_overrides(const std::string& spec) {
  KernelOverrides o;
  std::string compact = spec;
  compact.erase(std::remove(compact.begin(), compact.end(), ' '), compact.end());
  if (compact.empty()) return o;
  // Like every list option: an empty item is a typo, and an op given twice would silently take
  // the last, so both are refused.
  if (compact.back() == ',') core::fail("--kernels '{}': an empty item (a stray comma)", spec);
  std::stringstream ss(compact);
  std::string item;
  std::vector<std::string> seen;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) core::fail("--kernels '{}': an empty item (a stray comma)", spec);
    const auto eq = item.find('=');
    if (eq == std::string::npos) core::fail("--kernels '{}': expected op=kernel, got '{}'", spec, item);
    const std::string op = item.substr(0, eq), kernel = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), op) != seen.end())
      core::fail("--kernels '{}': op '{}' is given twice", spec, op);
    seen.push_back(op);
    // "auto", else one of `all` by its flag name.
    auto pick = [&](auto& slot, auto... all) {
      if (kernel == "auto") return void(slot.reset());
      for (auto k : {all...})
        if (kernel == kernel_flag_name(k)) return void(slot = k);
      std::string list = "auto";
      for (auto k : {all...}) list += fmt::format(", {}", kernel_flag_name(k));
      core::fail("--kernels '{}': kernel '{}' for op '{}' is not one of {}", spec, kernel, op, list);
    };
    if (op == "mla") {
      pick(o.mla, MlaKernel::kWgmma, MlaKernel::kKvMajor, MlaKernel::kTensorCore, MlaKernel::kCudaCore);
    } else if (op == "moe") {
      pick(o.moe, MoeKernel::kGrouped, MoeKernel::kPerExpert);
    } else {
      core::fail("--kernels '{}': unknown op '{}' (ops with a choice: mla, moe)", spec, op);
    }
  }
  return o;
}

KernelOverrides kernel_overrides_from(const std::string& flag_value) {
  if (!flag_value.empty()) return parse_kernel_overrides(flag_value);
  return parse_kernel_overrides(core::env_value("TESSERA_KERNELS").value_or(""));
}

MlaPlan plan_mla(const DeviceCaps& caps, const MlaShape& shape, const KernelOverrides& forced) {
  MlaPlan p;
  std::tie(p.decode, p.decode_row) = choose("mla decode", "mla", kMlaDecodePrefs, caps, shape, forced.mla);
  p.decode_forced = forced.mla.has_value();
  // Prefill chunks: decompressed K/V + tensor-core flash attention where the head dims allow, else
  // the fp32 absorbed kernel (also what --kernels mla=cuda-core selects).
  const std::string arch = architecture_problem(caps.sm);
  const std::string decompressed = forced.mla == MlaKernel::kCudaCore ? "forced by --kernels mla=cuda-core"
                                                                      : decompressed_prefill_problem(caps, shape);
  if (decompressed.empty()) {
    p.prefill = MlaPrefillKernel::kDecompressed;
    // The attention kernel of a bf16-precision step (mla_prefill_uses_wgmma decides it per step).
    const bool wgmma = mla_prefill_uses_wgmma(core::env_flag("TESSERA_MLA_PREFILL_WGMMA"), false,
                                              MlaDims{shape.heads, shape.nope, shape.rope, shape.v, shape.latent, 1.0f},
                                              caps.sm == 90 && has_sm90a_code());
    const std::string attend = fmt::format(
        "mla_prefill_attend ({}; TESSERA_MLA_PREFILL_PRECISION, default auto: split bf16 operands up to 2048 context "
        "positions, bf16 beyond)",
        wgmma ? "mma.sync in split precision, Hopper wgmma in bf16 (TESSERA_MLA_PREFILL_WGMMA, default 1)"
              : "mma.sync");
    p.prefill_row = {
        "mla prefill",
        (shape.fp8_cache ? "gather latents (fp8 -> bf16, exact) + kv_b GEMM (cuBLASLt, alpha = KV scale) + "
                         : "gather latents + kv_b GEMM (cuBLASLt) + ") +
            attend,
        fmt::format("qk {} + {}, v {}: {}", shape.nope, shape.rope, shape.v,
                    smem_of(mla_prefill_attend_smem_bytes(shape.nope, shape.rope, shape.v, true), caps)),
        true};
    // mla=cuda-core sends prefill chunks to the absorbed path on the fp32 kernel (and decode too).
    if (arch.empty() && kMlaDecodePrefs.back().why_not(caps, shape).empty())
      p.prefill_row.alternatives = {"mla=cuda-core"};
  } else {
    p.prefill = MlaPrefillKernel::kAbsorbed;
    const std::string core = kMlaDecodePrefs.back().why_not(caps, shape);
    p.prefill_row = {"mla prefill", "attend_kernel (fp32, CUDA cores) in the absorbed form",
                     core.empty()
                         ? fmt::format("{}; {}, split over the context", decompressed,
                                       smem_of(mla_cuda_core_smem_bytes(shape.heads, shape.latent, shape.rope), caps))
                         : fmt::format("{}; and {}", decompressed, core),
                     core.empty()};
  }
  if (!arch.empty()) p.prefill_row.reason = arch, p.prefill_row.available = false;
  return p;
}

MlaKernel MlaPlan::absorbed_kernel(bool decode_only) const {
  if (decode_only || decode_forced) {
    TESSERA_CHECK(decode_row.available, "MLA decode: {}", decode_row.reason);
    return decode;
  }
  TESSERA_CHECK(prefill_row.available, "MLA prefill: {}", prefill_row.reason);
  return MlaKernel::kCudaCore;
}

MoePlan plan_moe(const DeviceCaps& caps, const MoeShape& shape, const KernelOverrides& forced) {
  MoePlan p;
  std::tie(p.kernel, p.row) = choose("moe experts", "moe", kMoePrefs, caps, shape, forced.moe);
  p.forced = forced.moe.has_value();
  if (p.kernel == MoeKernel::kGrouped) {
    p.row.kernel = p.forced ? p.row.kernel
                            : fmt::format("{} (steps <= {} tokens), per-expert cuBLASLt GEMMs (larger)", p.row.kernel,
                                          kGroupedMoeMaxTokens);
  }
  return p;
}

bool MoePlan::grouped_allowed() const {
  TESSERA_CHECK(row.available, "MoE experts: {}", row.reason);
  return kernel == MoeKernel::kGrouped;
}

bool MoePlan::grouped_for(int64_t tokens) const {
  return grouped_allowed() && (forced || tokens <= kGroupedMoeMaxTokens);
}

bool KernelPlan::ok() const {
  return std::all_of(rows.begin(), rows.end(), [](const KernelChoice& k) { return k.available; });
}

KernelPlan plan_kernels(const DeviceCaps& caps, const MlaShape& mla, const MoeShape& moe,
                        const KernelOverrides& forced) {
  KernelPlan plan;
  plan.mla = plan_mla(caps, mla, forced);
  plan.moe = plan_moe(caps, moe, forced);
  const std::string arch = architecture_problem(caps.sm);
  auto add = [&](std::string op, std::string kernel, std::string reason, bool ok = true) {
    plan.rows.push_back(
        {std::move(op), std::move(kernel), arch.empty() ? std::move(reason) : arch, ok && arch.empty()});
  };
  add("embedding", "embedding_kernel", "bf16 table, any architecture");
  add("rms_norm", "rms_norm_kernel", "fp32, any architecture");
  add("linear",
      fmt::format("gemv_kernel (<= {} tokens, K a multiple of 256) or cuBLASLt bf16 GEMM, fp32 accumulate",
                  kGemvMaxTokens),
      "every dense projection (weights bf16 on the device); a decode step of 1-2 tokens streams each weight row "
      "once, a GEMM tile would be 1/64 used; q_a and kv_a run as one launch, and the q_a norm inside q_b's");
  add("mla prepare", "mla_prepare_kernel",
      "q rope, latent norm + rope and the cache write (bf16 or fp8) in one launch, fp32");
  plan.rows.push_back(plan.mla.decode_row);
  plan.rows.push_back(plan.mla.prefill_row);
  const bool router_ok = moe.experts <= 1024;
  add("moe router",
      fmt::format("router_fused_kernel (logits + top-k in one launch, <= {} tokens) or split-bf16 cuBLASLt GEMMs + "
                  "router_select_kernel",
                  kRouterKernelMaxTokens),
      router_ok ? "fp32 logits over bf16 weights, group-limited top-k on the device"
                : fmt::format("{} experts exceed the 1024 the selection kernel holds", moe.experts),
      router_ok);
  plan.rows.push_back(plan.moe.row);
  return plan;
}

}  // namespace tessera::ops::cuda
