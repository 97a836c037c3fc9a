// Loads for weights that a kernel streams exactly once per step (expert projections).
//
// L1::no_allocate keeps them out of L1. The L2 evict-first policy makes them the first lines L2
// gives up, so that a step's ~1 GB of streamed weights does not push out what the next kernels
// need: activations, metadata and the kernels' own code (a small kernel run from a cold L2 fetches
// every instruction from DRAM, which made a 5000-instruction router kernel take 25 us).
//
// Volatile: a plain asm counts as free of side effects, and nvcc speculated one a chunk past the
// end of its loop, a 16-byte read past the last weight row.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tessera::ops::cuda {

__device__ inline uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

__device__ inline uint4 load_stream(const __nv_bfloat16* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

}  // namespace tessera::ops::cuda
