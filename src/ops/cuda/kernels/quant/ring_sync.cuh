// The ring kernels' synchronisation (grouped_ring.cu, linear_ring.cu): a producer warp fills stages
// of shared memory by TMA, consumers wait on each stage's "full" mbarrier and the producer on its
// "empty" one; linear_ring.cu's clusters meet at cluster barriers and read each other's shared
// memory. Every mbarrier wait is bounded: a protocol error traps after kWaitLimitNs instead of
// hanging the device.
#pragma once

#include <cstdint>

#include "ops/cuda/kernels/common/bounded_wait.cuh"
#include "ops/cuda/kernels/quant/ring_layout.h"
#include "ops/cuda/ptx/tma_primitives.cuh"

namespace tessera::ops::cuda::ring {

// Waits for the phase of parity `parity` of mbarrier `bar`; traps after kWaitLimitNs.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  if (tma::mbarrier_try_wait(bar, parity)) return;
  const uint64_t start = global_ns();
  while (!tma::mbarrier_try_wait(bar, parity))
    if (global_ns() - start > kWaitLimitNs) __trap();
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The ring's mbarriers (8 bytes each, after its kRingStages stages in shared memory): stage s is
// "full" when the producer's one arrival and its copies' bytes are in, "empty" when each of the
// `consumers` warps has arrived.
struct Barriers {
  uint64_t* at;
  __device__ uint32_t full(int s) const { return smem_addr(at + s); }
  __device__ uint32_t empty(int s) const { return smem_addr(at + quant_mma::kRingStages + s); }
};
// Thread 0 initialises the barriers at `at`, then the whole block meets (every thread must call it).
__device__ __forceinline__ Barriers init_barriers(void* at, int consumers) {
  const Barriers b{static_cast<uint64_t*>(at)};
  if (threadIdx.x == 0) {
    for (int s = 0; s < quant_mma::kRingStages; ++s) {
      tma::mbarrier_init(b.full(s), 1);
      tma::mbarrier_init(b.empty(s), consumers);
    }
    tma::fence_mbarrier_init();
  }
  __syncthreads();
  return b;
}

// Clusters (sm_90a; elsewhere these are empty, as tma_primitives.cuh's, and their kernels are not
// launched). A barrier of every thread of the cluster that has not exited: release of this
// thread's memory operations before, acquire of the others' after (not .aligned: the threads of a
// warp may arrive apart).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The float at this block's shared address `addr` in block `rank` of the cluster (its distributed
// shared memory).
__device__ __forceinline__ float load_cluster_f32(uint32_t addr, uint32_t rank) {
  float v = 0.0f;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#else
  (void)addr, (void)rank;
#endif
  return v;
}

}  // namespace tessera::ops::cuda::ring
