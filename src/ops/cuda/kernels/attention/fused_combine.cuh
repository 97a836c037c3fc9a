// TESSERA_MLA_FUSED_COMBINE: the MLA decode kernels' context splits merge their partials themselves,
// in the blocks that finish last, instead of in the combine kernel (attention.cu: combine_kernel)
// launched after them. Used by the KV-major (sm80_kv_major.cu) and wgmma (sm90_wgmma.cu) kernels.
#pragma once

#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels/common/bounded_wait.cuh"
#include "ops/cuda/ptx/mma_primitives.cuh"

namespace tessera::ops::cuda::fused_combine {

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Shared memory combine_last_arrivals takes over a block's tiles: the split factors [NH][parts],
// 1/l [NH] and one float4 a thread for the sums of its split groups.
__host__ __device__ constexpr size_t smem_bytes(int nh, int parts, int threads) {
  return static_cast<size_t>(nh) * parts * 4 + static_cast<size_t>(nh) * 4 + static_cast<size_t>(threads) * 16;
}

// Called by every thread of every block of a decode kernel's grid (x: the `parts` = gridDim.x context
// splits; y: tokens; z: head groups of NH) once the block's partials are written: O unnormalised
// [split, t, h, LAT] in o_part, (m, l) [split, t, h] in ml_part. Each block counts itself in on
// `counter` (one per (token, head group)); a block whose ticket is among the last `combiners` waits
// until every split is in, then merges its slice of the group's NH x LAT outputs into o_out [t, h,
// LAT]: the split factors exp(m_s - M) and the sum l from every split's (m, l), then its columns'
// partials weighted by them, normalised (a token that sees no position, l = 0, gets o = 0 and lse
// -inf), as the combine kernel does. The host asks for it only where the whole grid fits the GPU at
// once, so every split a block waits for is running; the wait is bounded all the same (a trap
// after kWaitLimitNs). (Other streams' kernels, which never wait, free their slots as they end; but
// several such grids at once, as tensor-parallel ranks sharing one GPU run them, could fill the GPU
// with waiting blocks: before this becomes a default, the host must refuse it there.) The last
// block to leave resets the counter for the next launch.
// `smem`: at least smem_bytes(NH, parts, kThreads), free (the caller's tiles are done with);
// `ticket_s`: one int of shared memory outside it. parts <= kMaxParts; combiners a power of two
// dividing NH x LAT / 4.
template <int NH, int LAT, int kThreads, int kMaxParts>
__device__ void combine_last_arrivals(unsigned char* smem, int* ticket_s, unsigned* counter, int combiners, int heads,
                                      int h0, int t, int tokens, const float* o_part, const float* ml_part,
                                      float* __restrict__ o_out, float* __restrict__ lse) {
  const int parts = static_cast<int>(gridDim.x);
  mma::cp_async_wait<0>();  // the caller's last copies (zero fills past the end) have landed
  __threadfence();          // this thread's partials are visible device-wide before the block counts itself in
  __syncthreads();
  if (threadIdx.x == 0) *ticket_s = static_cast<int>(atomicAdd(counter, 1u)) - (parts - combiners);
  __syncthreads();
  const int slice = *ticket_s;
  if (slice < 0) return;
  if (threadIdx.x == 0) {
    if (load_acquire(counter) < static_cast<unsigned>(parts)) {
      const uint64_t start = global_ns();
      while (load_acquire(counter) < static_cast<unsigned>(parts)) {
        __nanosleep(64);
        if (global_ns() - start > kWaitLimitNs) __trap();
      }
    }
    // Leaving: this block needs the counter no more; the last of the combiners resets it.
    if (atomicAdd(counter, 1u) == static_cast<unsigned>(parts + combiners - 1)) atomicExch(counter, 0u);
  }
  __syncthreads();
  __threadfence();
  float* f_s = reinterpret_cast<float*>(smem);  // [NH][parts]
  float* inv_s = f_s + NH * parts;              // [NH]
  float4* red = reinterpret_cast<float4*>(inv_s + NH);
  constexpr int kWarps = kThreads / 32, kHeadsPerWarp = (NH + kWarps - 1) / kWarps, kPerLane = kMaxParts / 32;
  static_assert(kMaxParts % 32 == 0 && kHeadsPerWarp * kPerLane <= 32, "the factors' loads stay in registers");
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  // Split factors, heads warp, warp + kWarps, ...: lane i takes splits i, i + 32, ... of each, every
  // load in flight at once (lanes past the last split read it again, which leaves the maximum as
  // it is). From L2: other SMs wrote them during this kernel.
  const int64_t stride = static_cast<int64_t>(tokens) * heads;
  float2 v[kHeadsPerWarp][kPerLane];
#pragma unroll
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    const int h = warp + i * kWarps;
    const bool live = h < NH && h0 + h < heads;
    const float2* ml = reinterpret_cast<const float2*>(ml_part) + static_cast<int64_t>(t) * heads + h0 + h;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      v[i][j] = live ? __ldcg(ml + min(lane + 32 * j, parts - 1) * stride) : make_float2(-FLT_MAX, 0.0f);
  }
#pragma unroll
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    const int h = warp + i * kWarps;
    if (h >= NH || h0 + h >= heads) continue;
    float M = -FLT_MAX;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) M = fmaxf(M, v[i][j].x);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float den = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int sp = lane + 32 * j;
      if (sp >= parts) break;
      const float f = __expf(v[i][j].x - M);
      f_s[h * parts + sp] = f;
      den += f * v[i][j].y;
    }
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) {
      inv_s[h] = den > 0.0f ? 1.0f / den : 0.0f;
      if (lse && slice == 0) lse[static_cast<int64_t>(t) * heads + h0 + h] = den > 0.0f ? M + logf(den) : -INFINITY;
    }
  }
  __syncthreads();
  // This slice's float4 columns of the group's [NH][LAT] output. Fewer columns than threads (few
  // parts, many combiners): `groups` thread groups each sum every groups-th split of a column, then
  // add up in shared memory; else each thread sums every split of its columns.
  constexpr int kF4 = NH * LAT / 4;
  const int cols = kF4 / combiners;
  const int64_t split4 = static_cast<int64_t>(tokens) * heads * (LAT / 4);
  const int64_t group4 = (static_cast<int64_t>(t) * heads + h0) * (LAT / 4);  // the group's first float4
  const float4* src = reinterpret_cast<const float4*>(o_part) + group4;
  float4* dst = reinterpret_cast<float4*>(o_out) + group4;
  constexpr int kBatch = 8;  // partial loads in flight a thread
  // Sums splits first, first + step, ... of float4 column c4 into acc.
  auto sum_splits = [&](int c4, int first, int step, float4& acc) {
    const int h = c4 / (LAT / 4);
    for (int s0 = first; s0 < parts; s0 += step * kBatch) {
      float4 p[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int sp = s0 + j * step;
        p[j] = sp < parts ? __ldcg(src + sp * split4 + c4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int sp = s0 + j * step;
        const float f = sp < parts ? f_s[h * parts + sp] : 0.0f;
        acc.x += f * p[j].x;
        acc.y += f * p[j].y;
        acc.z += f * p[j].z;
        acc.w += f * p[j].w;
      }
    }
  };
  auto store = [&](int c4, float4 sum) {
    const float inv = inv_s[c4 / (LAT / 4)];
    dst[c4] = make_float4(sum.x * inv, sum.y * inv, sum.z * inv, sum.w * inv);
  };
  if (cols >= kThreads) {
    for (int col = static_cast<int>(threadIdx.x); col < cols; col += kThreads) {
      const int c4 = slice * cols + col;
      if (h0 + c4 / (LAT / 4) >= heads) continue;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      sum_splits(c4, 0, 1, acc);
      store(c4, acc);
    }
    return;
  }
  const int groups = kThreads / cols;
  const int col = static_cast<int>(threadIdx.x) % cols, grp = static_cast<int>(threadIdx.x) / cols;
  const int c4 = slice * cols + col;
  const bool live = h0 + c4 / (LAT / 4) < heads;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (live) sum_splits(c4, grp, groups, acc);
  red[threadIdx.x] = acc;
  __syncthreads();
  if (grp == 0 && live) {
    float4 sum = red[col];
    for (int g = 1; g < groups; ++g) {
      const float4 r = red[g * cols + col];
      sum.x += r.x, sum.y += r.y, sum.z += r.z, sum.w += r.w;
    }
    store(c4, sum);
  }
}

}  // namespace tessera::ops::cuda::fused_combine
