// Hopper tensor-memory-accelerator (TMA) and mbarrier primitives (sm_90a only), for kernels that
// let one thread per consumer group issue whole tiles of global -> shared copies instead of every
// thread issuing 16-byte cp.async copies: cp.async.bulk.tensor through a tensor map (a
// CUtensorMap passed as a __grid_constant__ kernel parameter), completion counted in bytes on a
// shared-memory mbarrier (arrive.expect_tx by the issuing thread, try_wait.parity by the readers).
// As in wgmma_primitives.cuh, every asm body is compiled only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the functions are empty and their kernels trap.
// (PTX ISA: "mbarrier", "cp.async.bulk.tensor", "createpolicy"; the same instructions as
// CUTLASS's ClusterTransactionBarrier and SM90_TMA_LOAD_2D.)
#pragma once

#include <cstdint>

namespace tessera::ops::cuda::tma {

// An mbarrier in shared memory (8 bytes, 8-byte aligned) expecting `count` arrivals a phase.
__device__ inline void mbarrier_init(uint32_t bar, uint32_t count) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Makes this thread's mbarrier.init visible to the async proxy (the TMA unit) and to the other
// threads (followed by a __syncthreads before any use).
__device__ inline void fence_mbarrier_init() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also announces `bytes` more bytes of copies to wait for in this phase.
__device__ inline void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// Whether the phase of parity `parity` has completed (one try; mbarrier_wait loops on it).
__device__ inline bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 1;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
#else
  (void)bar, (void)parity;
#endif
  return done != 0;
}
// Waits until the phase of parity `parity` has completed (all arrivals and all announced bytes);
// the copies it counted are then visible to this thread and to its wgmma reads.
__device__ inline void mbarrier_wait(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}
// One arrival (release: this thread's earlier shared-memory reads are done before it counts).
__device__ inline void mbarrier_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}
// An L2 policy for data read once (the KV cache of a decode step): evict it first.
__device__ inline uint64_t evict_first_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}
// Makes a tensor map that the host wrote into global memory (cudaMemcpy, not a kernel parameter)
// visible to this thread's tensor copies (the CUDA programming guide's pattern for maps in global
// memory: an acquire proxy fence at system scope, the writer being the host).
__device__ inline void fence_tensormap_acquire(const void* map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
               : "memory");
#else
  (void)map;
#endif
}
// Brings the tensor map (a kernel parameter) into the TMA unit's cache before the first copy.
__device__ inline void prefetch_map(const void* map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  (void)map;
#endif
}
// Copies the box at element coordinates (c0 = innermost, c1) of the 2-D tensor map `map` to shared
// address `dst` (laid out as the map's swizzle says; 1024-byte aligned for the 128-byte swizzle),
// counting its bytes on mbarrier `bar`. Boxes reaching past the tensor's bounds are zero-filled.
__device__ inline void load_2d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, uint64_t policy) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
#else
  (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)policy;
#endif
}

}  // namespace tessera::ops::cuda::tma
