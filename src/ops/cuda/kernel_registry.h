// Which CUDA kernel runs each op on this GPU, and why — decided from the device's capabilities and
// the model's shapes before any weight is read (`tessera plan`), and by the backend at run time.
// No CUDA headers here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::ops::cuda {

struct DeviceCaps {
  std::string name;
  int sm = 0;                   // compute capability, e.g. 90
  int num_sms = 0;
  int64_t smem_per_block_optin = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
};

// Device 0; throws core::Error when there is no usable GPU.
DeviceCaps query_device_caps();

// The CUDA architectures this binary carries machine code (or PTX) for, as CMake spelled them
// (e.g. "80-real;90a-real;100-real;120-real;120-virtual").
std::string compiled_architectures();
// Empty when this binary can run on `sm`; otherwise the reason and the rebuild flag to use.
std::string architecture_problem(int sm);

struct MlaShape {
  int64_t heads = 0, latent = 0, rope = 0;
  int64_t nope = 0, v = 0;  // per-head query/key and value widths (the prefill kernel's shapes)
  bool fp8_cache = false;   // the KV cache holds fp8 e4m3 (else bf16)
};

struct KernelChoice {
  std::string op;
  std::string kernel;
  std::string reason;
  bool available = true;  // false: no kernel for this GPU/shape (the plan fails before loading)
};

// Kernels forced or disabled by the user (--kernels / TESSERA_KERNELS), "auto" = the registry's
// choice. mla: auto | wgmma | kv-major | mma | cuda-core (decode steps); moe: auto | grouped | per-expert.
struct KernelOverrides {
  std::string mla = "auto";
  std::string moe = "auto";
};
// Parses "op=kernel[,op=kernel...]" ("" = all auto); throws core::Error naming the entry at fault.
KernelOverrides parse_kernel_overrides(const std::string& spec);
// The spec from --kernels when given, else from the TESSERA_KERNELS environment variable.
KernelOverrides kernel_overrides_from(const std::string& flag_value);

// Decode steps up to this many tokens run the routed experts with the grouped kernels.
constexpr int64_t kGroupedMoeMaxTokens = 256;

// Kernel of each op for a model with these shapes on `caps`, honouring `forced`.
std::vector<KernelChoice> plan_kernels(const DeviceCaps& caps, const MlaShape& mla, int64_t experts,
                                       int64_t hidden, int64_t moe_inter, const KernelOverrides& forced);

// Whether the KV-major tensor-core decode kernel has an instance for this latent + rope.
bool mla_kv_major_supported(int64_t latent, int64_t rope);
// Whether the Hopper wgmma decode kernel can run: shapes (latent 512 + rope 64, heads a multiple of
// 64), a device of compute capability exactly 9.0, sm_90a code in this binary, and its shared
// memory. Empty when it can; otherwise the reason.
std::string mla_wgmma_problem(int sm, int64_t smem_per_block_optin, int64_t heads, int64_t latent, int64_t rope);
// Its shared memory per block (bytes) for a bf16 or fp8 cache.
int64_t mla_kv_major_shared_bytes(int64_t heads, int64_t latent, int64_t rope, bool fp8);
// Shared memory (bytes) the MLA kernels need for an entry of latent + rope.
int64_t mla_mma_smem_bytes(int64_t latent, int64_t rope);
int64_t mla_cuda_core_smem_bytes(int64_t heads, int64_t latent, int64_t rope);

}  // namespace tessera::ops::cuda
