// Matrix-vector products for decode steps of a few tokens, where a GEMM library pays for tiles
// that are 1/64 used, a split-K reduction kernel and a conversion of the activations to bf16:
//   gemv:            out[b][t, n] = x[b][t] · W[b][n]       (rows of W contiguous: nn.Linear, W_UV)
//   gemv_transposed: out[b][t, l] = Σ_n x[b][t, n] · W[b][n, l]  (columns contiguous: W_UK
//   absorption)
// Weights are bf16, activations fp32, products accumulated in fp32 (the CPU reference's math).
// Each load instruction of a warp reads 512 contiguous bytes (32 lanes x 16 bytes) and every lane
// has 16 of them in flight. Narrow matrices split K over the warps of a block, so that even a
// 576-row projection keeps ~2000 warps streaming.
#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/stream_load.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRows = 4;     // weight rows a warp reads side by side
constexpr int kUnroll = 4;   // 512-byte chunks of each row in flight
constexpr int kChunk = 256;  // K elements one warp-wide 16-byte load covers

__device__ inline void unpack8(const uint4& w, float (&f)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(p[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// acc += w[0..8) · x[0..8), x fp32.
__device__ inline void fma8(float& acc, const float (&w)[8], const float* x) {
  const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
  acc = fmaf(w[0], a.x, acc);
  acc = fmaf(w[1], a.y, acc);
  acc = fmaf(w[2], a.z, acc);
  acc = fmaf(w[3], a.w, acc);
  acc = fmaf(w[4], b.x, acc);
  acc = fmaf(w[5], b.y, acc);
  acc = fmaf(w[6], b.z, acc);
  acc = fmaf(w[7], b.w, acc);
}

// Block: kWarps / slices groups of kRows rows; the `slices` warps of a group take the K chunks
// slice, slice + slices, ... and meet in shared memory. blockIdx.y is the batch.
template <int NT>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs g, int slices) {
  pdl_wait();  // first: launched with launch_dependent
  __shared__ float part[kWarps][kRows][NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / slices, slice = warp % slices, groups = kWarps / slices;
  const int64_t b = blockIdx.y;
  const int n0 = (static_cast<int>(blockIdx.x) * groups + group) * kRows;
  const bool rows_valid = n0 < g.n;  // n % kRows == 0: all of a warp's rows or none
  float acc[kRows][NT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[r][j] = 0.0f;
  if (rows_valid) {
    const uint64_t policy = l2_evict_first_policy();
    const __nv_bfloat16* w = g.w + b * g.w_batch + static_cast<int64_t>(n0) * g.w_row + 8 * lane;
    const float* x = g.x + b * g.x_batch + 8 * lane;
    const int chunks = g.k / kChunk;
    for (int c0 = slice; c0 < chunks; c0 += slices * kUnroll) {
      uint4 raw[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * slices;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          raw[r][u] = c < chunks
                          ? load_stream(w + r * g.w_row + static_cast<int64_t>(c) * kChunk, policy)
                          : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * slices;
        if (c >= chunks) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wf[8];
          unpack8(raw[r][u], wf);
#pragma unroll
          for (int j = 0; j < NT; ++j)
            if (j < g.tokens)
              fma8(acc[r][j], wf, x + j * g.x_row + static_cast<int64_t>(c) * kChunk);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      float v = acc[r][j];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) part[warp][r][j] = v;
    }
  __syncthreads();
  // Thread (group, r, j) sums its slices in order.
  const int t = threadIdx.x;
  if (t < groups * kRows * NT) {
    const int gi = t / (kRows * NT), r = (t / NT) % kRows, j = t % NT;
    const int n = (static_cast<int>(blockIdx.x) * groups + gi) * kRows + r;
    if (n < g.n && j < g.tokens) {
      float v = 0.0f;
      for (int s = 0; s < slices; ++s) v += part[gi * slices + s][r][j];
      g.out[b * g.out_batch + j * g.out_row + n] = v;
    }
  }
}

// out[b][t, l] = Σ_n x[b][t, n] · W[b][n, l]: a block per (batch, 256 columns l); lane owns 8
// consecutive l, the 8 warps split the n rows and meet in shared memory.
constexpr int kMaxTransposedRowsPerWarp = 32;
template <int NT>
__global__ void __launch_bounds__(kWarps * 32) gemv_transposed_kernel(GemvArgs g) {
  pdl_wait();  // first: launched with launch_dependent
  __shared__ float part[kWarps][NT][kChunk];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.y;
  const int l0 = static_cast<int>(blockIdx.x) * kChunk + 8 * lane;
  const int per_warp = (g.k + kWarps - 1) / kWarps;  // rows n of this warp: [warp * per_warp, ...)
  const int n_begin = warp * per_warp, n_end = min(g.k, n_begin + per_warp);
  float acc[NT][8];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[j][i] = 0.0f;
  const uint64_t policy = l2_evict_first_policy();
  const __nv_bfloat16* w = g.w + b * g.w_batch + l0;
  const float* x = g.x + b * g.x_batch;
  for (int n0 = n_begin; n0 < n_end; n0 += kMaxTransposedRowsPerWarp / 2) {
    constexpr int kAhead = kMaxTransposedRowsPerWarp / 2;
    uint4 raw[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      raw[u] = n0 + u < n_end ? load_stream(w + static_cast<int64_t>(n0 + u) * g.w_row, policy)
                              : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (n0 + u >= n_end) break;
      float wf[8];
      unpack8(raw[u], wf);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j >= g.tokens) break;
        const float xv = x[j * g.x_row + n0 + u];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[j][i] = fmaf(wf[i], xv, acc[j][i]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) part[warp][j][8 * lane + i] = acc[j][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < NT * kChunk; idx += kWarps * 32) {
    const int j = idx / kChunk, l = idx % kChunk;
    const int col = static_cast<int>(blockIdx.x) * kChunk + l;
    if (j >= g.tokens || col >= g.n) continue;
    float v = 0.0f;
    for (int s = 0; s < kWarps; ++s) v += part[s][j][l];
    g.out[b * g.out_batch + j * g.out_row + col] = v;
  }
}

}  // namespace

bool gemv_applies(int64_t tokens, int64_t k, int64_t n) {
  return tokens >= 1 && tokens <= kGemvMaxTokens && k % kChunk == 0 && n % kRows == 0;
}

bool gemv_transposed_applies(int64_t tokens, int64_t n_cols) {
  return tokens >= 1 && tokens <= kGemvMaxTokens && n_cols % kChunk == 0;
}

void launch_gemv(const GemvArgs& g, int64_t batch, int num_sms, cudaStream_t s) {
  // Enough warps to keep every SM streaming (~16 a SM): split K when the matrix has few rows.
  const int64_t row_warps = (g.n / kRows) * batch, chunks = g.k / kChunk;
  int slices = 1;
  while (slices < kWarps && row_warps * slices < 16LL * num_sms && chunks >= 2LL * slices)
    slices *= 2;
  const int groups = kWarps / slices;
  dim3 grid(static_cast<unsigned>((g.n / kRows + groups - 1) / groups),
            static_cast<unsigned>(batch));
  static_assert(kGemvMaxTokens <= 2, "instantiate gemv_kernel for more tokens");
  if (g.tokens <= 1) {
    launch_dependent(gemv_kernel<1>, grid, kWarps * 32, 0, s, g, slices);
  } else {
    launch_dependent(gemv_kernel<2>, grid, kWarps * 32, 0, s, g, slices);
  }
}

void launch_gemv_transposed(const GemvArgs& g, int64_t batch, cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(g.n / kChunk), static_cast<unsigned>(batch));
  if (g.tokens <= 1) {
    launch_dependent(gemv_transposed_kernel<1>, grid, kWarps * 32, 0, s, g);
  } else {
    launch_dependent(gemv_transposed_kernel<2>, grid, kWarps * 32, 0, s, g);
  }
}

}  // namespace tessera::ops::cuda
