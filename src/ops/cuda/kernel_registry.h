// Which CUDA kernel runs each op on this GPU, and why. One chooser per op family walks a preference
// list; each candidate says why it cannot run on a (device, shapes, KV dtype), so the predicate that
// selects is the one that explains. `tessera plan` prints the choice before any weight is read, and
// the backend (cuda_ops.cpp) executes the same choice: it calls the same choosers with the op's
// shapes and never decides on its own. No CUDA headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/cuda/kernel_kinds.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

struct DeviceCaps {
  std::string name;
  int sm = 0;  // compute capability, e.g. 90
  int num_sms = 0;
  int64_t smem_per_block_optin = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
};

// Device `index`; throws core::Error when there is no such usable GPU.
DeviceCaps query_device_caps(int index = 0);

// The CUDA architectures this binary carries machine code (or PTX) for, as CMake spelled them
// (e.g. "80-real;90a-real;100-real;120-real;120-virtual").
std::string compiled_architectures();
// Empty when this binary can run on `sm`; otherwise the reason and the rebuild flag to use.
std::string architecture_problem(int sm);
// True when the build carries sm_90a machine code ("90a-real"): only that target has wgmma and TMA
// (ptx/), which a plain sm_90 build compiles as traps or no-ops.
bool has_sm90a_code();

// The name --kernels uses: wgmma, kv-major, mma, cuda-core; grouped, per-expert.
std::string_view kernel_flag_name(MlaKernel k);
std::string_view kernel_flag_name(MoeKernel k);
// Whether the kernel reads an fp8 e4m3 KV cache (the others read bf16 only).
bool reads_fp8_cache(MlaKernel k);

// Kernels forced by the user (--kernels / TESSERA_KERNELS); none = the registry's choice.
struct KernelOverrides {
  std::optional<MlaKernel> mla;  // decode steps (and the absorbed path of prefill chunks)
  std::optional<MoeKernel> moe;
  bool operator==(const KernelOverrides&) const = default;
};
// Parses "op=kernel[,op=kernel...]" ("" and "op=auto" = the registry's choice); throws core::Error
// naming the entry at fault.
KernelOverrides parse_kernel_overrides(const std::string& spec);
// The spec from --kernels when given, else from the TESSERA_KERNELS environment variable.
KernelOverrides kernel_overrides_from(const std::string& flag_value);

// One line of the plan (the op contract's, ops.h).
using KernelChoice = ops::KernelChoice;

struct MlaShape {
  int64_t heads = 0, latent = 0, rope = 0;
  int64_t nope = 0, v = 0;  // per-head query/key and value widths (the prefill kernel's shapes)
  bool fp8_cache = false;   // the KV cache holds fp8 e4m3 (else bf16)
  bool operator==(const MlaShape&) const = default;
};
struct MoeShape {
  int64_t experts = 0, hidden = 0, inter = 0;  // routed experts, their input and intermediate widths
  bool operator==(const MoeShape&) const = default;
};

struct MlaPlan {
  MlaKernel decode = MlaKernel::kCudaCore;
  bool decode_forced = false;
  MlaPrefillKernel prefill = MlaPrefillKernel::kAbsorbed;
  KernelChoice decode_row, prefill_row;
  // The kernel of the absorbed path for a step: decode-only steps run `decode`; prefill chunks that
  // reach it (no decompressed-prefill instance, or mla=cuda-core) keep the fp32 kernel, as bf16 q/p
  // rounding over long prompts costs top-1 agreement, unless a kernel was forced. Throws core::Error
  // with the plan's reason when that kernel cannot run.
  MlaKernel absorbed_kernel(bool decode_only) const;
};
struct MoePlan {
  MoeKernel kernel = MoeKernel::kPerExpert;
  bool forced = false;
  KernelChoice row;
  // Whether a step of `tokens` tokens runs the routed experts on the grouped kernels: decode-sized
  // steps (<= kGroupedMoeMaxTokens) unless forced for all. Throws core::Error with the plan's reason
  // when the chosen kernel cannot run.
  bool grouped_for(int64_t tokens) const;
  // Whether the grouped kernels may run at all (the choice, or forced); for kernels that serve every
  // step size.
  bool grouped_allowed() const;
};

// Decode steps up to this many tokens run the routed experts with the grouped kernels (larger steps
// read the routing back to the host, so CUDA graphs record only steps up to this size too).
constexpr int64_t kGroupedMoeMaxTokens = 256;

MlaPlan plan_mla(const DeviceCaps& caps, const MlaShape& shape, const KernelOverrides& forced);
MoePlan plan_moe(const DeviceCaps& caps, const MoeShape& shape, const KernelOverrides& forced);

struct KernelPlan {
  MlaPlan mla;
  MoePlan moe;
  std::vector<KernelChoice> rows;  // every op, in the order `tessera plan` prints them
  bool ok() const;
};
// Kernel of each op for a model with these shapes on `caps`, honouring `forced`.
KernelPlan plan_kernels(const DeviceCaps& caps, const MlaShape& mla, const MoeShape& moe,
                        const KernelOverrides& forced);

// Why the Hopper wgmma decode kernel cannot run ("" = it can): shapes (latent 512 + rope 64, heads
// a multiple of 64), a device of compute capability exactly 9.0, sm_90a code in this binary, and
// its shared memory.
std::string mla_wgmma_problem(int sm, int64_t smem_per_block_optin, int64_t heads, int64_t latent, int64_t rope);
// Whether the KV-major tensor-core decode kernel has an instance for this latent + rope, and its
// shared memory per block (bytes) for a bf16 or fp8 cache.
bool mla_kv_major_supported(int64_t latent, int64_t rope);
int64_t mla_kv_major_shared_bytes(int64_t heads, int64_t latent, int64_t rope, bool fp8);
// Shared memory (bytes) the MLA kernels need for an entry of latent + rope.
int64_t mla_mma_smem_bytes(int64_t latent, int64_t rope);
int64_t mla_cuda_core_smem_bytes(int64_t heads, int64_t latent, int64_t rope);

}  // namespace tessera::ops::cuda
