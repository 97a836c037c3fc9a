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
#include <map>
#include <mutex>

#include "ops/cuda/kernels/common/block_reduce.cuh"
#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

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

// The weight rows a warp reads: of the first matrix, or of the second one (pair launches).
struct RowRange {
  const __nv_bfloat16* w;
  int64_t w_row;
  float* out;
  int64_t out_row;
  int n0;  // first row within its matrix
  bool valid;
};
__device__ inline RowRange rows_at(const GemvArgs& g, int64_t b, int n0) {
  if (n0 < g.n)
    return {g.w + b * g.w_batch + static_cast<int64_t>(n0) * g.w_row,
            g.w_row,
            g.out + b * g.out_batch,
            g.out_row,
            n0,
            true};
  const int m = n0 - g.n;
  return {g.w2 + static_cast<int64_t>(m) * g.w2_row, g.w2_row, g.out2, g.out2_row, m, m < g.n2};
}

// Chunks c0, c0 + slices, ... (kUnroll of them) of kRows weight rows, all loads in flight at once.
__device__ __forceinline__ void load_chunks(uint4 (&raw)[kRows][kUnroll], const __nv_bfloat16* w, int64_t w_row, int c0,
                                            int slices, int chunks, uint64_t policy) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = c0 + u * slices;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      raw[r][u] =
          c < chunks ? load_stream(w + r * w_row + static_cast<int64_t>(c) * kChunk, policy) : make_uint4(0, 0, 0, 0);
  }
}

// A block iteration is kWarps / slices groups of kRows rows; the `slices` warps of a group take
// the K chunks slice, slice + slices, ... and meet in shared memory. A block runs iterations
// blockIdx.x, blockIdx.x + gridDim.x, ... (the grid is at most what is resident at once), and
// issues the next iteration's first weights as soon as it has consumed the current one's last, so
// that its loads stay in flight across the reduction and the store: a block a row group paid a
// ramp (launch, first loads, for kNorm the norm) per row group, which held the short projections
// of a decode step to ~40% of the bandwidth. blockIdx.y is the batch. Rows [0, n) are the first
// matrix's, [n, n + n2) the second's (n and n2 multiples of kRows, so a warp's rows are in one
// matrix). kNorm: x is normalised into shared memory first (norm_weight, norm_eps).
template <int NT, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs g, int slices, int iterations) {
  __shared__ float part[kWarps][kRows][NT];
  __shared__ __align__(16) float x_normed[kNorm ? NT * kGemvNormMaxK : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / slices, slice = warp % slices, groups = kWarps / slices;
  const int64_t b = blockIdx.y;
  const uint64_t policy = l2_evict_first_policy();
  const int all_chunks = g.k / kChunk, step = slices * kUnroll;
  auto rows_of = [&](int it) { return rows_at(g, b, (it * groups + group) * kRows); };
  int it = static_cast<int>(blockIdx.x);
  RowRange rows = rows_of(it);
  uint4 raw[kRows][kUnroll];
  // The first batch of a row group's weights, by this warp.
  auto load_first = [&](const RowRange& r) {
    if (r.valid && slice < all_chunks) load_chunks(raw, r.w + 8 * lane, r.w_row, slice, slices, all_chunks, policy);
  };
  // The first weights are in flight before the previous kernel has finished (weights are constant:
  // launch.cuh) and before x is normalised.
  load_first(rows);
  pdl_wait();  // launched with launch_dependent: x is the previous kernel's output
  const float* x = g.x + b * g.x_batch + 8 * lane;
  int64_t x_row = g.x_row;
  if constexpr (kNorm) {
    // Every block normalises the (short) rows itself: cheaper than a launch of its own.
    // Batches of 4 loads a thread in flight (the prefetched weights hold 64 registers already).
    constexpr int kBatch = 4, kStep = kBatch * kWarps * 32;
    for (int j = 0; j < g.tokens; ++j) {
      const float* xr = g.x + b * g.x_batch + j * g.x_row;
      float* xn = x_normed + j * g.k;
      float ss = 0.0f;
      for (int base = 0; base < g.k; base += kStep) {
        float v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + threadIdx.x + u * kWarps * 32;
          v[u] = i < g.k ? xr[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + threadIdx.x + u * kWarps * 32;
          if (i < g.k) xn[i] = v[u];
          ss += v[u] * v[u];
        }
      }
      const float inv = rsqrtf(block_sum(ss) / static_cast<float>(g.k) + g.norm_eps);
      // The norm weights through the read-only path, in batches (a plain loop waited for each).
      for (int base = 0; base < g.k; base += kStep) {
        float nw[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + threadIdx.x + u * kWarps * 32;
          nw[u] = i < g.k ? __ldg(g.norm_weight + i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + threadIdx.x + u * kWarps * 32;
          if (i < g.k) xn[i] = xn[i] * inv * nw[u];
        }
      }
    }
    __syncthreads();
    x = x_normed + 8 * lane;
    x_row = g.k;
  }
  for (; it < iterations; it += static_cast<int>(gridDim.x)) {
    const int chunks = rows.valid ? all_chunks : 0;
    const int next_it = it + static_cast<int>(gridDim.x);
    const RowRange next = next_it < iterations ? rows_of(next_it) : RowRange{nullptr, 0, nullptr, 0, 0, false};
    float acc[kRows][NT];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[r][j] = 0.0f;
    for (int c0 = slice; c0 < chunks; c0 += step) {
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
            if (j < g.tokens) fma8(acc[r][j], wf, x + j * x_row + static_cast<int64_t>(c) * kChunk);
        }
      }
      if (c0 + step < chunks) load_chunks(raw, rows.w + 8 * lane, rows.w_row, c0 + step, slices, chunks, policy);
    }
    load_first(next);  // in flight during this iteration's reduction and store
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
      const RowRange out_rows = rows_at(g, b, (it * groups + gi) * kRows);
      if (out_rows.valid && j < g.tokens) {
        float v = 0.0f;
        for (int s = 0; s < slices; ++s) v += part[gi * slices + s][r][j];
        out_rows.out[j * out_rows.out_row + out_rows.n0 + r] = v;
      }
    }
    __syncthreads();  // part is rewritten by the next iteration
    rows = next;
  }
}

// out[b][t, l] = Σ_n x[b][t, n] · W[b][n, l]: a block per (batch, 256 columns l); lane owns 8
// consecutive l, the 8 warps split the n rows and meet in shared memory.
constexpr int kMaxTransposedRowsPerWarp = 32;
template <int NT>
__global__ void __launch_bounds__(kWarps * 32) gemv_transposed_kernel(GemvArgs g) {
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
  constexpr int kAhead = kMaxTransposedRowsPerWarp / 2;
  uint4 raw[kAhead];
  auto load = [&](int n0) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      raw[u] =
          n0 + u < n_end ? load_stream(w + static_cast<int64_t>(n0 + u) * g.w_row, policy) : make_uint4(0, 0, 0, 0);
  };
  load(n_begin);  // weights only, before the previous kernel has finished (launch.cuh)
  pdl_wait();     // launched with launch_dependent: x is the previous kernel's output
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < g.tokens * g.pass_through; i += kWarps * 32) {
      const int j = i / g.pass_through, c = i % g.pass_through;
      g.out[b * g.out_batch + j * g.out_row + g.n + c] = x[j * g.x_row + g.k + c];
    }
  for (int n0 = n_begin; n0 < n_end; n0 += kAhead) {
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
    if (n0 + kAhead < n_end) load(n0 + kAhead);
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

namespace {

// The kernel instance for these arguments.
using GemvKernel = void (*)(GemvArgs, int, int);
GemvKernel gemv_instance(const GemvArgs& g) {
  static_assert(kGemvMaxTokens <= 2, "instantiate gemv_kernel for more tokens");
  const bool norm = g.norm_weight != nullptr;
  if (g.tokens <= 1) return norm ? gemv_kernel<1, true> : gemv_kernel<1, false>;
  return norm ? gemv_kernel<2, true> : gemv_kernel<2, false>;
}

// Blocks of this instance resident on one SM (registers and shared memory decide), asked once.
int resident_blocks_per_sm(GemvKernel kernel) {
  static std::mutex mu;
  static std::map<GemvKernel, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(kernel);
  if (it != known.end()) return it->second;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kWarps * 32, 0) != cudaSuccess || blocks < 1)
    blocks = 1;
  return known[kernel] = blocks;
}

int64_t gemv_rows(const GemvArgs& g) { return g.n + (g.w2 ? g.n2 : 0); }

}  // namespace

int gemv_slices(const GemvArgs& g, int64_t batch, int num_sms) {
  // A block is kWarps / slices groups of kRows rows, each group's K split over `slices` warps.
  // Every warp streams the same bytes, so the grid's last wave decides: a grid of 1.45 waves of
  // resident blocks leaves a third of the GPU idle for a third of the time (q_b of Kimi-K2.5 at one
  // block row a warp). Pick the split whose blocks fill their waves best; among equal fills (within
  // 3%), the fewest slices (fewer partial sums, longer runs of each row).
  const int64_t row_groups = gemv_rows(g) / kRows * batch, chunks = g.k / kChunk;
  const int64_t resident = static_cast<int64_t>(resident_blocks_per_sm(gemv_instance(g))) * num_sms;
  int best = 1;
  double best_fill = -1.0;
  for (int slices = 1; slices <= kWarps && slices <= chunks; slices *= 2) {
    const int64_t groups = kWarps / slices, blocks = (row_groups + groups - 1) / groups;
    const int64_t waves = (blocks + resident - 1) / resident;
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * resident);
    if (fill > best_fill + 0.03) {
      best = slices;
      best_fill = fill;
    }
  }
  return best;
}

void launch_gemv(const GemvArgs& g, int64_t batch, int num_sms, cudaStream_t s, int slices) {
  if (slices <= 0) slices = gemv_slices(g, batch, num_sms);
  const int64_t rows = gemv_rows(g);
  const int groups = kWarps / slices;
  GemvArgs a = g;
  if (!a.w2) a.n2 = 0;
  const GemvKernel kernel = gemv_instance(a);
  const int64_t iterations = (rows / kRows + groups - 1) / groups;
  // As many blocks as are resident at once (over the batch), each looping over its iterations.
  // TESSERA_GEMV_LOOP=0: a block an iteration (for A/B measurements).
  static const bool loop = ab_switch_on("TESSERA_GEMV_LOOP");
  const int64_t resident = static_cast<int64_t>(resident_blocks_per_sm(kernel)) * num_sms;
  const int64_t blocks = loop ? std::min(iterations, std::max<int64_t>(1, resident / batch)) : iterations;
  dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(batch));
  launch_dependent(kernel, grid, kWarps * 32, 0, s, a, slices, static_cast<int>(iterations));
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
