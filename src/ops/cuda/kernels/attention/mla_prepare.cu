// The inputs of an MLA layer's attention made ready in one launch (Ops::mla_prepare): at decode
// these are four tiny kernels (q rope, latent norm, latent rope, cache write) whose time is launch
// and ramp, not work. Block (t, 0) finishes token t's latent and writes it to the cache; blocks
// (t, 1..) rotate the rope columns of its query heads.
#include <algorithm>

#include "ops/cuda/kernels/attention/kv_store.cuh"
#include "ops/cuda/kernels/common/block_reduce.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxQueryBlocks = 16;

// Rotates the interleaved pair at p by (c, s), as rope_kernel.
__device__ inline void rotate_pair(float* p, float c, float s) {
  const float a = p[0], b = p[1];
  p[0] = a * c - b * s;
  p[1] = a * s + b * c;
}

template <class CacheT>
__global__ void __launch_bounds__(kThreads) mla_prepare_kernel(MlaPrepareArgs a, CacheT* cache) {
  pdl_wait();  // first: launched with launch_dependent
  const int64_t t = blockIdx.x;
  const int half = a.rope / 2;
  const float* cos = a.cos + t * half;
  const float* sin = a.sin + t * half;
  if (blockIdx.y > 0) {
    float* q = a.q + t * a.q_row + a.nope;
    const int pairs = a.heads * half, stride = (gridDim.y - 1) * blockDim.x;
    for (int j = (blockIdx.y - 1) * blockDim.x + threadIdx.x; j < pairs; j += stride) {
      const int head = j / half, i = j % half;
      rotate_pair(q + static_cast<int64_t>(head) * (a.nope + a.rope) + 2 * i, cos[i], sin[i]);
    }
    return;
  }
  const int entry = a.latent + a.rope;
  float* row = a.kv + t * entry;
  // A token another rank stores (slot -1) is normalised and rotated but not written.
  const int64_t slot = kv_slot_offset(a.info, a.tables, t, a.page, entry);
  const bool store = slot >= 0;
  CacheT* dst = cache + (store ? slot : 0);
  // c_kv and its norm weights in registers (kPerThread a thread covers latent <= 1024), all loads
  // issued before the first store: the stores might alias them, for all the compiler knows.
  constexpr int kPerThread = 4;
  float v[kPerThread], w[kPerThread], ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    v[j] = i < a.latent ? row[i] : 0.0f;
    w[j] = i < a.latent ? a.norm_weight[i] : 0.0f;
    ss += v[j] * v[j];
  }
  for (int i = threadIdx.x + kPerThread * kThreads; i < a.latent; i += kThreads) ss += row[i] * row[i];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(a.latent) + a.eps);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < a.latent) {
      const float y = v[j] * inv * w[j];
      row[i] = y;
      if (store) store_kv(dst + i, y, a.scale);
    }
  }
  for (int i = threadIdx.x + kPerThread * kThreads; i < a.latent; i += kThreads) {
    const float y = row[i] * inv * a.norm_weight[i];
    row[i] = y;
    if (store) store_kv(dst + i, y, a.scale);
  }
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float* p = row + a.latent + 2 * i;
    rotate_pair(p, cos[i], sin[i]);
    if (store) {
      store_kv(dst + a.latent + 2 * i, p[0], a.scale);
      store_kv(dst + a.latent + 2 * i + 1, p[1], a.scale);
    }
  }
}

}  // namespace

void launch_mla_prepare(const MlaPrepareArgs& a, void* cache, bool fp8, cudaStream_t s) {
  if (a.tokens <= 0) return;
  const int64_t pairs = a.heads * (a.rope / 2);
  const int64_t q_blocks = std::clamp<int64_t>((pairs + kThreads - 1) / kThreads, 1, kMaxQueryBlocks);
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(1 + q_blocks));
  if (fp8) {
    launch_dependent(mla_prepare_kernel<uint8_t>, grid, kThreads, 0, s, a, static_cast<uint8_t*>(cache));
  } else {
    launch_dependent(mla_prepare_kernel<__nv_bfloat16>, grid, kThreads, 0, s, a, static_cast<__nv_bfloat16*>(cache));
  }
}

}  // namespace tessera::ops::cuda
