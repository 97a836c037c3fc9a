// The kernels an op family can choose between (kernel_registry.h chooses; the launchers in
// kernels/kernels.h take the choice). Plain C++17: the .cu files include it.
#pragma once

namespace tessera::ops::cuda {

// The absorbed-MLA attention kernels (kernels/attention/): CUDA cores in fp32 (any shape, bf16 or
// fp8 cache), heads as the MMA M (mma.sync, bf16 cache), positions as M (KV-major mma.sync, bf16 or
// fp8) and Hopper wgmma (64 heads a block, sm_90a, bf16 cache).
enum class MlaKernel { kCudaCore, kTensorCore, kKvMajor, kWgmma };
// Prefill chunks: decompressed K/V + tensor-core flash attention (mla_prefill.h), or the absorbed
// path on the fp32 kernel.
enum class MlaPrefillKernel { kDecompressed, kAbsorbed };
// Routed experts: grouped kernels over expert-sorted pairs (kernels/moe/grouped.cu and gemv.cu) or
// one cuBLASLt GEMM per expert.
enum class MoeKernel { kGrouped, kPerExpert };

}  // namespace tessera::ops::cuda
