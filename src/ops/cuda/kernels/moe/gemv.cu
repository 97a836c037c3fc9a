// Routed experts with few tokens: matrix-vector kernels over the pairs that grouped.cu's
// permute kernel sorted by expert. Steps of up to 4 tokens run only these; larger decode steps
// give them the experts with at most 4 pairs (most of them: 128 tokens x 8 of 384 experts is ~3
// per expert) and leave the others (the shared expert) to the tensor-core kernels. With one token per expert an MMA
// tile is 1/16 used and its B fragments make every load instruction touch 8 weight rows 64 bytes
// each; here each load instruction of a warp reads 512 contiguous bytes of one weight row (32 lanes
// x 16 bytes), 16 such loads in flight per lane, and the dot products run on the FMA units (fp32
// accumulation of bf16 products, as the MMA path). A warp owns 4 weight rows:
//   gate/up: rows n, n+1 of both gate and up, so it finishes act[m, n] = silu(g) * u itself (no
//            partial sums, no finish kernel);
//   down:    rows n .. n+3, y[pair(m), n] = act[m] · Wd[e][n].
#include <cuda_bf16.h>

#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kStreams = 4;  // weight rows a warp reads side by side
constexpr int kUnroll = 4;   // 512-byte chunks of each row in flight
constexpr int kChunk = 256;  // K elements one warp-wide 16-byte load covers

// acc += Σ_i w[i] · x[i] over 8 bf16 pairs.
__device__ inline void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

// NT pairs [m0, m0 + NT) of one expert (pairs past `end` repeat its last one; their sums are not
// written) through this warp's kStreams weight rows wrow[], starting at row n0 of the output.
template <int NT, bool kGateUp>
__device__ inline void project_pairs(const __nv_bfloat16* __restrict__ a, int k_dim, int top_k,
                                     const int32_t* __restrict__ sorted, int m0, int end,
                                     const __nv_bfloat16* const (&wrow)[kStreams], uint64_t policy, int n0, int n_dim,
                                     __nv_bfloat16* __restrict__ act_out, float* __restrict__ y_out) {
  constexpr int kRows = kGateUp ? kStreams / 2 : kStreams;
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* arow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int m = min(m0 + j, end - 1);
    arow[j] = a + static_cast<int64_t>(kGateUp ? sorted[m] / top_k : m) * k_dim + 8 * lane;
  }
  float acc[kStreams][NT];
#pragma unroll
  for (int s = 0; s < kStreams; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[s][j] = 0.0f;
  int k0 = 0;
  for (; k0 + kChunk * kUnroll <= k_dim; k0 += kChunk * kUnroll) {
    uint4 w[kStreams][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int s = 0; s < kStreams; ++s) w[s][u] = load_stream(wrow[s] + k0 + kChunk * u, policy);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(arow[j] + k0 + kChunk * u);
#pragma unroll
        for (int s = 0; s < kStreams; ++s) fma8(acc[s][j], w[s][u], xv);
      }
  }
  for (; k0 < k_dim; k0 += kChunk) {
    uint4 w[kStreams];
#pragma unroll
    for (int s = 0; s < kStreams; ++s) w[s] = load_stream(wrow[s] + k0, policy);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 xv = *reinterpret_cast<const uint4*>(arow[j] + k0);
#pragma unroll
      for (int s = 0; s < kStreams; ++s) fma8(acc[s][j], w[s], xv);
    }
  }
#pragma unroll
  for (int s = 0; s < kStreams; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[s][j] += __shfl_xor_sync(0xffffffffu, acc[s][j], off);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int m = m0 + j;
      if (m >= end) break;
      if constexpr (kGateUp) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float g = acc[2 * r][j], u = acc[2 * r + 1][j];
          act_out[static_cast<int64_t>(m) * n_dim + n0 + r] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
        }
      } else {
        const int64_t pair = sorted[m];
#pragma unroll
        for (int r = 0; r < kRows; ++r) y_out[pair * n_dim + n0 + r] = acc[r][j];
      }
    }
  }
}

// One block per (group of kWarps * rows-per-warp weight rows, active expert). a: the input rows
// (x [tokens, k] for gate/up, read at token sorted[m] / top_k; act [pairs, k] for down, read at m).
// Experts with more than max_pairs pairs are left to the tensor-core kernels. The pairs go NT at a
// time with NT fitted to what is left (1, 2 or 4), so an expert with one token does one token's work.
template <bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32)
    expert_gemv_kernel(const __nv_bfloat16* __restrict__ a, int k_dim, int top_k, const int32_t* __restrict__ sorted,
                       const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                       const int32_t* __restrict__ num_active, const __nv_bfloat16* const* __restrict__ w0,
                       const __nv_bfloat16* const* __restrict__ w1, int n_dim, int max_pairs,
                       __nv_bfloat16* __restrict__ act_out, float* __restrict__ y_out) {
  pdl_wait();  // first: launched with launch_dependent
  if (static_cast<int>(blockIdx.y) >= *num_active) return;
  constexpr int kRows = kGateUp ? kStreams / 2 : kStreams;  // rows of each matrix a warp owns
  const int warp = threadIdx.x >> 5;
  const int n0 = (static_cast<int>(blockIdx.x) * kWarps + warp) * kRows;
  if (n0 >= n_dim) return;  // n_dim % kRows == 0: a warp's rows are all valid or all past the end
  const int e = active[blockIdx.y];
  const int begin = offsets[e], end = offsets[e + 1];
  if (end - begin > max_pairs) return;
  const uint64_t policy = l2_evict_first_policy();
  const __nv_bfloat16* wrow[kStreams];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) {
    const __nv_bfloat16* w = kGateUp && (s & 1) ? w1[e] : w0[e];
    const int row = n0 + (kGateUp ? s >> 1 : s);
    wrow[s] = w + static_cast<int64_t>(row) * k_dim + 8 * (threadIdx.x & 31);
  }
  for (int m0 = begin; m0 < end; m0 += 4) {
    const int left = end - m0;
    if (left == 1) {
      project_pairs<1, kGateUp>(a, k_dim, top_k, sorted, m0, end, wrow, policy, n0, n_dim, act_out, y_out);
    } else if (left == 2) {
      project_pairs<2, kGateUp>(a, k_dim, top_k, sorted, m0, end, wrow, policy, n0, n_dim, act_out, y_out);
    } else {
      project_pairs<4, kGateUp>(a, k_dim, top_k, sorted, m0, end, wrow, policy, n0, n_dim, act_out, y_out);
    }
  }
}

}  // namespace

bool moe_gemv_supported(int64_t hidden, int64_t inter) {
  return hidden % kChunk == 0 && inter % kChunk == 0 && hidden % kStreams == 0 && inter % (kStreams / 2) == 0;
}

void launch_moe_gemv_gate_up(const __nv_bfloat16* x, int64_t hidden, int64_t top_k, const MoeGroupedScratch& s,
                             unsigned expert_slots, int max_pairs, const __nv_bfloat16* const* gate_w,
                             const __nv_bfloat16* const* up_w, int64_t inter, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps * kStreams / 2;
  dim3 grid(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots);
  launch_dependent(expert_gemv_kernel<true>, grid, kWarps * 32, 0, stream, x, static_cast<int>(hidden),
                   static_cast<int>(top_k), s.sorted, s.offsets, s.active, s.num_active, gate_w, up_w,
                   static_cast<int>(inter), max_pairs, s.act, nullptr);
}

void launch_moe_gemv_down(int64_t hidden, int64_t top_k, const MoeGroupedScratch& s, unsigned expert_slots,
                          int max_pairs, const __nv_bfloat16* const* down_w, int64_t inter, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps * kStreams;
  dim3 grid(static_cast<unsigned>((hidden + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots);
  launch_dependent(expert_gemv_kernel<false>, grid, kWarps * 32, 0, stream, s.act, static_cast<int>(inter),
                   static_cast<int>(top_k), s.sorted, s.offsets, s.active, s.num_active, down_w, nullptr,
                   static_cast<int>(hidden), max_pairs, nullptr, s.y);
}

}  // namespace tessera::ops::cuda
