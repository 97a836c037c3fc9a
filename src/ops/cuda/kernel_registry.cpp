#include "ops/cuda/kernel_registry.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mla_prefill_kernels.h"

#ifndef TESSERA_CUDA_ARCHS
#define TESSERA_CUDA_ARCHS "unknown"
#endif

namespace tessera::ops::cuda {

DeviceCaps query_device_caps() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    core::fail("no CUDA device is available (cudaGetDeviceCount found none)");
  }
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  DeviceCaps c;
  c.name = p.name;
  c.sm = p.major * 10 + p.minor;
  c.num_sms = p.multiProcessorCount;
  c.smem_per_block_optin = static_cast<int64_t>(p.sharedMemPerBlockOptin);
  size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
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
  return fmt::format("this build has no kernels for sm_{} (it carries {}); rebuild with "
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

namespace {
// True when the build carries sm_90a machine code ("90a-real"): only that target has wgmma, and a
// plain sm_90 build compiles the wgmma kernel as a trap.
bool has_sm90a_code() {
  std::stringstream ss(compiled_architectures());
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.rfind("90a", 0) == 0 && item.find("virtual") == std::string::npos) return true;
  return false;
}
}  // namespace

std::string mla_wgmma_problem(int sm, int64_t smem_per_block_optin, int64_t heads, int64_t latent, int64_t rope) {
  if (!mla_attend_wgmma_supported(latent, rope, heads))
    return fmt::format("the wgmma kernel needs latent 512 + rope 64 and a multiple of 64 heads (got latent {} + rope "
                       "{}, {} heads)",
                       latent, rope, heads);
  if (sm != 90) return fmt::format("the wgmma kernel needs an sm_90 (Hopper) GPU, this one is sm_{}", sm);
  if (!has_sm90a_code())
    return fmt::format("the wgmma kernel needs sm_90a code, this build carries {} (rebuild with "
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

KernelOverrides parse_kernel_overrides(const std::string& spec) {
  KernelOverrides o;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) core::fail("--kernels '{}': expected op=kernel, got '{}'", spec, item);
    const std::string op = item.substr(0, eq), kernel = item.substr(eq + 1);
    auto pick = [&](std::string& slot, std::initializer_list<const char*> allowed) {
      for (const char* a : allowed)
        if (kernel == a) return void(slot = kernel);
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      core::fail("--kernels '{}': kernel '{}' for op '{}' is not one of {}", spec, kernel, op, list);
    };
    if (op == "mla") {
      pick(o.mla, {"auto", "wgmma", "kv-major", "mma", "cuda-core"});
    } else if (op == "moe") {
      pick(o.moe, {"auto", "grouped", "per-expert"});
    } else {
      core::fail("--kernels '{}': unknown op '{}' (ops with a choice: mla, moe)", spec, op);
    }
  }
  return o;
}

KernelOverrides kernel_overrides_from(const std::string& flag_value) {
  if (!flag_value.empty()) return parse_kernel_overrides(flag_value);
  const char* env = std::getenv("TESSERA_KERNELS");
  return parse_kernel_overrides(env ? env : "");
}

std::vector<KernelChoice> plan_kernels(const DeviceCaps& caps, const MlaShape& mla, int64_t experts, int64_t hidden,
                                       int64_t moe_inter, const KernelOverrides& forced) {
  const std::string& forced_mla = forced.mla;
  std::vector<KernelChoice> out;
  const std::string arch = architecture_problem(caps.sm);
  auto add = [&](std::string op, std::string kernel, std::string reason) {
    out.push_back({std::move(op), std::move(kernel), arch.empty() ? std::move(reason) : arch, arch.empty()});
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

  const int64_t mma_smem = mla_mma_smem_bytes(mla.latent, mla.rope);
  const int64_t core_smem = mla_cuda_core_smem_bytes(mla.heads, mla.latent, mla.rope);
  const bool mma_shape = mla_attend_mma_supported(mla.latent, mla.rope);
  const bool mma_fits = mma_smem <= caps.smem_per_block_optin;
  const bool core_fits = core_smem <= caps.smem_per_block_optin && mla.latent <= 512;
  std::string decode_reason;
  std::string decode_kernel;
  bool decode_ok = true;
  const int64_t kv_smem = mla_kv_major_smem_bytes(mla.heads, mla.latent, mla.rope, mla.fp8_cache);
  const bool kv_major_ok = mla_attend_kv_major_supported(mla.latent, mla.rope) && kv_smem <= caps.smem_per_block_optin;
  if (mla.fp8_cache && forced_mla == "mma") {
    // The heads-as-M kernel reads bf16 only.
    decode_kernel = "attend_mma_kernel";
    decode_reason = "--kernels mla=mma was forced but it cannot read an fp8_e4m3 KV cache (--kv-cache-dtype fp8); "
                    "use mla=kv-major or mla=cuda-core, or --kv-cache-dtype bf16";
    decode_ok = false;
  } else if (mla.fp8_cache && forced_mla != "cuda-core" && caps.sm >= 80 && kv_major_ok) {
    decode_kernel = fmt::format("attend_kv_major_kernel (fp8 cache: cp.async of the bytes, bf16 in shared memory, "
                                "mma.sync bf16, positions x {} heads)",
                                mla.heads <= 8 ? 8 : 16);
    decode_reason = fmt::format("{}sm_{} >= 80, latent {} + rope {}, {} KB shared memory of {} KB",
                                forced_mla == "kv-major" ? "forced by --kernels mla=kv-major; " : "", caps.sm,
                                mla.latent, mla.rope, kv_smem / 1024, caps.smem_per_block_optin / 1024);
  } else if (mla.fp8_cache) {
    decode_kernel = "attend_kernel (fp32, CUDA cores; fp8 cache dequantized on load)";
    decode_reason = forced_mla == "cuda-core" ? "forced by --kernels mla=cuda-core"
                    : caps.sm < 80            ? "tensor cores need sm_80+"
                                              : fmt::format("the KV-major kernel has no instance for latent {} + rope "
                                                            "{} or needs {} KB of shared memory (the GPU allows {} KB), "
                                                            "and the heads-as-M kernel reads bf16 only",
                                                            mla.latent, mla.rope, kv_smem / 1024,
                                                            caps.smem_per_block_optin / 1024);
    decode_ok = core_fits;
    if (forced_mla == "kv-major") {
      decode_ok = false;
      decode_reason = "--kernels mla=kv-major was forced but " + decode_reason;
    }
  } else if (forced_mla == "cuda-core" || !mma_shape || !mma_fits || caps.sm < 80) {
    decode_kernel = "attend_kernel (fp32, CUDA cores)";
    decode_reason = forced_mla == "cuda-core" ? "forced by --kernels mla=cuda-core"
                    : !mma_shape ? fmt::format("latent {} + rope {} is not a tensor-core shape", mla.latent, mla.rope)
                    : !mma_fits  ? fmt::format("tensor-core kernel needs {} KB of shared memory, the GPU allows {} KB",
                                               mma_smem / 1024, caps.smem_per_block_optin / 1024)
                                 : "tensor cores need sm_80+";
    decode_ok = core_fits;
    if (forced_mla == "mma") {
      decode_ok = false;
      decode_reason = "--kernels mla=mma was forced but " + decode_reason;
    }
  } else if (forced_mla != "mma" && kv_major_ok) {
    decode_kernel = fmt::format("attend_kv_major_kernel (mma.sync bf16, positions x {} heads, cp.async 2 stages)",
                                mla.heads <= 8 ? 8 : 16);
    decode_reason = fmt::format("{}sm_{} >= 80, latent {} + rope {}, {} KB shared memory of {} KB",
                                forced_mla == "kv-major" ? "forced by --kernels mla=kv-major; " : "", caps.sm,
                                mla.latent, mla.rope, kv_smem / 1024, caps.smem_per_block_optin / 1024);
  } else if (forced_mla == "kv-major") {
    decode_kernel = "attend_kv_major_kernel";
    decode_reason = fmt::format("--kernels mla=kv-major was forced but latent {} + rope {} has no instance or needs "
                                "more shared memory than the GPU's {} KB",
                                mla.latent, mla.rope, caps.smem_per_block_optin / 1024);
    decode_ok = false;
  } else {
    decode_kernel = "attend_mma_kernel (mma.sync m16n8k16 bf16, 16 heads a block)";
    decode_reason = fmt::format("{}sm_{} >= 80, latent {} + rope {}, {} KB shared memory of {} KB",
                                forced_mla == "mma" ? "forced by --kernels mla=mma; " : "", caps.sm, mla.latent,
                                mla.rope, mma_smem / 1024, caps.smem_per_block_optin / 1024);
  }
  // Hopper with 64, 128, ... heads a GPU and a bf16 cache: the wgmma kernel (64 heads as one
  // warpgroup MMA's M); the mma.sync kernels above stay for 8/16 heads, fp8 caches and other GPUs.
  if (std::string wgmma_problem =
          mla_wgmma_problem(caps.sm, caps.smem_per_block_optin, mla.heads, mla.latent, mla.rope);
      forced_mla == "wgmma" || (forced_mla == "auto" && wgmma_problem.empty() && !mla.fp8_cache)) {
    if (wgmma_problem.empty() && mla.fp8_cache)
      wgmma_problem = "it cannot read an fp8_e4m3 KV cache (--kv-cache-dtype fp8); use mla=kv-major or "
                      "mla=cuda-core, or --kv-cache-dtype bf16";
    decode_kernel = "attend_wgmma_kernel (wgmma m64n64k16 / m64n256k16 bf16, 64 heads a block, cp.async 2 stages)";
    decode_ok = wgmma_problem.empty();
    decode_reason = !decode_ok ? "--kernels mla=wgmma was forced but " + wgmma_problem
                               : fmt::format("{}sm_90 with sm_90a code, {} heads in blocks of 64, latent {} + rope {}, "
                                             "{} KB shared memory of {} KB",
                                             forced_mla == "wgmma" ? "forced by --kernels mla=wgmma; " : "", mla.heads,
                                             mla.latent, mla.rope, mla_wgmma_smem_bytes() / 1024,
                                             caps.smem_per_block_optin / 1024);
  }
  if (!core_fits && decode_kernel.find("fp32") != std::string::npos)
    decode_reason += fmt::format("; fp32 kernel needs {} KB of shared memory, the GPU allows {} KB", core_smem / 1024,
                                 caps.smem_per_block_optin / 1024);
  out.push_back({"mla decode", decode_kernel, arch.empty() ? decode_reason : arch, arch.empty() && decode_ok});
  // Prefill chunks: decompressed K/V + tensor-core flash attention where the head dims allow, else
  // the fp32 absorbed kernel (also what --kernels mla=cuda-core selects).
  const int64_t prefill_smem = mla_prefill_attend_smem_bytes(mla.nope, mla.rope, mla.v, /*split=*/true);
  if (forced_mla != "cuda-core" && mla_prefill_attend_supported(mla.nope, mla.rope, mla.v, mla.latent) &&
      prefill_smem > 0 && prefill_smem <= caps.smem_per_block_optin) {
    out.push_back({"mla prefill",
                   mla.fp8_cache ? "gather latents (fp8 -> bf16, exact) + kv_b GEMM (cuBLASLt, alpha = KV scale) + "
                                   "mla_prefill_attend (mma.sync, split bf16 operands)"
                                 : "gather latents + kv_b GEMM (cuBLASLt) + mla_prefill_attend (mma.sync, split bf16 "
                                   "operands)",
                   arch.empty() ? fmt::format("qk {} + {}, v {}: {} KB shared memory of {} KB", mla.nope, mla.rope,
                                              mla.v, prefill_smem / 1024, caps.smem_per_block_optin / 1024)
                                : arch,
                   arch.empty()});
  } else {
    out.push_back({"mla prefill", "attend_kernel (fp32, CUDA cores) in the absorbed form",
                   arch.empty() ? (core_fits ? fmt::format("{}{} KB shared memory of {} KB; split over the context",
                                                           forced_mla == "cuda-core" ? "forced by --kernels mla=cuda-core; "
                                                                                     : "no tensor-core prefill instance for these head dims; ",
                                                           core_smem / 1024, caps.smem_per_block_optin / 1024)
                                             : fmt::format("needs {} KB of shared memory, the GPU allows {} KB",
                                                           core_smem / 1024, caps.smem_per_block_optin / 1024))
                                : arch,
                   arch.empty() && core_fits});
  }
  const bool router_ok = experts <= 1024;
  out.push_back({"moe router",
                 fmt::format("router_fused_kernel (logits + top-k in one launch, <= {} tokens) or split-bf16 "
                             "cuBLASLt GEMMs + router_select_kernel",
                             kRouterKernelMaxTokens),
                 arch.empty() ? (router_ok ? "fp32 logits over bf16 weights, group-limited top-k on the device"
                                           : fmt::format("{} experts exceed the 1024 the selection kernel holds", experts))
                              : arch,
                 arch.empty() && router_ok});
  const bool grouped_ok = moe_grouped_supported(hidden, moe_inter, experts);
  if (forced.moe == "per-expert") {
    add("moe experts", "per-expert cuBLASLt GEMMs + gather/scatter", "forced by --kernels moe=per-expert");
  } else if (!grouped_ok) {
    out.push_back({"moe experts", "per-expert cuBLASLt GEMMs + gather/scatter",
                   arch.empty() ? fmt::format("{}hidden {} / moe_intermediate {} are not multiples of 32 or {} "
                                              "experts exceed 1024, so the grouped kernels do not apply",
                                              forced.moe == "grouped" ? "--kernels moe=grouped was forced but " : "",
                                              hidden, moe_inter, experts)
                                : arch,
                   arch.empty() && forced.moe != "grouped"});
  } else {
    // Over the expert-sorted pairs, experts with few pairs stream as matrix-vector products where
    // the widths allow (moe_gemv.cu), the others on grouped mma.sync kernels (moe_grouped.cu).
    const std::string grouped =
        moe_gemv_supported(hidden, moe_inter)
            ? fmt::format("expert_gemv_kernel for experts with <= {} pairs, grouped mma.sync kernels for heavier "
                          "ones (the shared expert)",
                          kMoeGemvMaxPairs)
            : "grouped mma.sync kernels over expert-sorted pairs";
    if (forced.moe == "grouped") {
      add("moe experts", grouped, "forced by --kernels moe=grouped");
    } else {
      add("moe experts", fmt::format("{} (steps <= {} tokens), per-expert cuBLASLt GEMMs (larger)", grouped,
                                     kGroupedMoeMaxTokens),
          "decode reads each routed expert once with no host round trip, and a model's shared expert streams on "
          "a second stream while the router runs; prefill is compute-bound");
    }
  }
  return out;
}

}  // namespace tessera::ops::cuda
