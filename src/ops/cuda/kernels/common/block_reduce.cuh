// Block-wide reductions shared by the row kernels.
#pragma once

namespace tessera::ops::cuda {

// The sum of v over the block's threads (any blockDim up to 1024), returned to every thread. Safe
// to call again in the same kernel: the shared slots are not reused before every thread has read.
__device__ inline float block_sum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    float s = lane < warps ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();
  return t;
}

}  // namespace tessera::ops::cuda
