// The pieces of the quantized tensor-core kernels (W4A16 / W8A16 on mma.sync m16n8k16, bf16 in,
// fp32 accumulate) that every variant shares: the tile shapes, the in-register decode of NVFP4 and
// FP8 codes into bf16 B fragments, the activations' A fragments, and one K block's MMAs
// (k_block_dot). grouped_mma.cu streams the codes from global memory into registers; grouped_ring.cu
// from a shared-memory ring a producer warp fills by TMA. See grouped_mma.cu for the scheme.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_pairs.h"
#include "ops/cuda/kernels/quant/quant_matrix.cuh"
#include "ops/cuda/kernels/quant/ring_layout.h"  // the tile shapes
#include "ops/cuda/kernels/quant/ring_sync.cuh"
#include "ops/cuda/ptx/mma_primitives.cuh"

namespace tessera::ops::cuda::quant_mma {

using mma::mma_bf16;

// What a format's K block costs a lane: 16-byte loads, and how many K blocks of loads are in
// flight (NVFP4 4: 8 took 168 registers, one block an SM, and was slower; FP8 2, the same bytes).
template <QuantFormat F>
struct MmaLayout;
template <>
struct MmaLayout<QuantFormat::kNvfp4> {
  static constexpr int kLoads = 1;
  static constexpr int kAhead = 4;
  static constexpr float kSumUnbias = 0x1p9f;  // see group_scales_of
};
template <>
struct MmaLayout<QuantFormat::kFp8Block> {
  static constexpr int kLoads = 2;
  static constexpr int kAhead = 2;
  static constexpr float kSumUnbias = 1.0f;  // decode_fp8's values are exact
};

// A routing value (pair counts, active experts) of the expert kernels. kEarly: read before the PDL
// wait (the down projection's early start, TESSERA_EXPERT_EARLY_DOWN), from L2: an SM's L1 may still
// hold the previous step's.
template <bool kEarly>
__device__ __forceinline__ int32_t load_routing(const int32_t* p) {
  if constexpr (kEarly) return __ldcg(p);
  return *p;
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }

// NVFP4: the codes' bits under a bf16 exponent are the values times 2^-126; the exponent bias is
// folded into the group scale: scale · 2^117 (at most 448 · 2^117 < 2^126, the largest bf16
// exponent; exact, an e4m3 scale has 4 significant bits), so one multiply gives value · scale · 2^-9
// (exact: at most 6 significant bits, and at least 2^-19, a normal number) and the fp32 sums are
// scaled back by 2^9 (kSumUnbias) with the global scale.

// The 8 codes of device-layout word `q` (mma_pairs.h) as bf16 pairs (0, 1), (2, 3), (4, 5), (6, 7),
// times `scale` (group_scales_of the group's scale) and 2^-126.
__device__ __forceinline__ void decode_nvfp4(uint32_t q, __nv_bfloat162 scale, uint32_t (&b)[4]) {
  uint32_t bits[4];
  mma_pairs::nvfp4_pairs(q, bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = bf16x2_bits(__hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits[i]), scale));
}

// FP8: the 8 e4m3 values of x (0-3) and y (4-7) as exact bf16 pairs (0, 1), (2, 3), (4, 5), (6, 7):
// mma_pairs::fp8_pairs gives each value times 2^-120 (subnormals included), which one multiply by
// 2^120 makes exact.
__device__ __forceinline__ void decode_fp8(uint32_t x, uint32_t y, uint32_t (&b)[4]) {
  const __nv_bfloat162 unbias = __floats2bfloat162_rn(0x1p120f, 0x1p120f);
  uint32_t bits[4];
  mma_pairs::fp8_pairs(x, y, bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = bf16x2_bits(__hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits[i]), unbias));
}

// Activations of 8 consecutive K positions (bf16, 16 bytes) as the pairs (0, 1), (2, 3), (4, 5),
// (6, 7) that the decoders produce for the weights: the words as loaded.
__device__ __forceinline__ void act_pairs(const uint4& r, uint32_t (&a)[4]) {
  a[0] = r.x;
  a[1] = r.y;
  a[2] = r.z;
  a[3] = r.w;
}

__device__ __forceinline__ uint4 load_or_zero(const __nv_bfloat16* p) {
  return p ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ uint32_t word(const uint4& r, int i) {
  return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}

// NVFP4: the lane's two group scales of a K block (two e4m3 bytes of sc) times 2^117, each as a bf16
// pair: both decoded at once (scale · 2^-120, mma_pairs.h), then 2^237 in two exact multiplies
// (2^118 · 2^119: one does not fit bf16), and each half taken to both halves.
__device__ __forceinline__ void group_scales_of(uint32_t sc, __nv_bfloat162 (&scale)[2]) {
  const uint32_t bits = mma_pairs::nvfp4_scale_pair(sc);
  __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  v = __hmul2(v, __floats2bfloat162_rn(0x1p118f, 0x1p118f));
  v = __hmul2(v, __floats2bfloat162_rn(0x1p119f, 0x1p119f));
  scale[0] = __low2bfloat162(v);
  scale[1] = __high2bfloat162(v);
}
template <int S>
__device__ __forceinline__ void group_scales(const uint32_t (&sc)[S], __nv_bfloat162 (&scale)[S][2]) {
#pragma unroll
  for (int s = 0; s < S; ++s) group_scales_of(sc[s], scale[s]);
}

// Word w of each stream's K block (its 8 values [k + 8w, + 8)) decoded into b[s]: the pairs (0, 1),
// (2, 3), (4, 5), (6, 7), NVFP4 times the group's scale (scale from group_scales; unused for FP8).
template <QuantFormat F, int S>
__device__ __forceinline__ void decode_word(const uint4 (&raw)[S][MmaLayout<F>::kLoads],
                                            const __nv_bfloat162 (&scale)[S][2], int w, uint32_t (&b)[S][4]) {
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if constexpr (F == QuantFormat::kNvfp4) {
      decode_nvfp4(word(raw[s][0], w), scale[s][w / 2], b[s]);
    } else {
      const uint4& r = raw[s][w / 2];
      decode_fp8(word(r, 2 * (w % 2)), word(r, 2 * (w % 2) + 1), b[s]);
    }
  }
}

template <int S, int MT>
__device__ __forceinline__ void zero(float (&acc)[S][MT][4]) {
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][t][i] = 0.0f;
}

// One K block: acc[s][t] += A_t · W_s over the lane's values [k, k + 32) (k = 128 kb + 32 c) from
// its raw codes and scales of each stream s (quant::load_scales); lo[t] / hi[t] the lane's two
// pairs' activation rows of tile t (null past the expert's end). Each weight fragment is decoded
// once and multiplied into every tile.
template <QuantFormat F, int S, int MT>
__device__ __forceinline__ void k_block_dot(const uint4 (&raw)[S][MmaLayout<F>::kLoads], const uint32_t (&sc)[S], int k,
                                            const __nv_bfloat16* const (&lo)[MT], const __nv_bfloat16* const (&hi)[MT],
                                            float (&acc)[S][MT][4]) {
  constexpr bool kNvfp4 = F == QuantFormat::kNvfp4;
  // NVFP4: the lane's two groups of 16 values (words 0-1 and 2-3); FP8: the MMAs of the block go to
  // part, which the block's scale multiplies into acc.
  __nv_bfloat162 scale[S][2];
  float part[S][MT][4];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if constexpr (kNvfp4) {
      group_scales_of(sc[s], scale[s]);
    } else {
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[s][t][i] = 0.0f;
    }
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // 8 values each: [k + 8w, + 8)
    uint32_t b[S][4];
    decode_word<F, S>(raw, scale, w, b);
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      uint32_t alo[4], ahi[4];
      act_pairs(load_or_zero(lo[t] ? lo[t] + k + 8 * w : nullptr), alo);
      act_pairs(load_or_zero(hi[t] ? hi[t] + k + 8 * w : nullptr), ahi);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if constexpr (kNvfp4) {
          mma_bf16(acc[s][t], alo[0], ahi[0], alo[1], ahi[1], b[s][0], b[s][1]);
          mma_bf16(acc[s][t], alo[2], ahi[2], alo[3], ahi[3], b[s][2], b[s][3]);
        } else {
          mma_bf16(part[s][t], alo[0], ahi[0], alo[1], ahi[1], b[s][0], b[s][1]);
          mma_bf16(part[s][t], alo[2], ahi[2], alo[3], ahi[3], b[s][2], b[s][3]);
        }
      }
    }
  }
  if constexpr (!kNvfp4) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const float f = __uint_as_float(sc[s]);
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][t][i] = fmaf(part[s][t][i], f, acc[s][t][i]);
    }
  }
}

// Decode sizes, weights as the MMA's A operand: the lane's two streams' rows g are A's rows g and
// g + 8 (one MMA serves both: half the MMAs of k_block_dot for a tile), and the activations of
// token tile t (8 pairs: the MMA's N) its B operand, each lane loading only its own pair g's row
// (tok[t], null past the expert's end). acc[t]: C of tile t, rows (stream 0 row g, stream 1 row g)
// x pairs (2c, 2c + 1).
template <QuantFormat F, int NT>
__device__ __forceinline__ void k_block_dot_wa(const uint4 (&raw)[2][MmaLayout<F>::kLoads], const uint32_t (&sc)[2],
                                               int k, const __nv_bfloat16* const (&tok)[NT], float (&acc)[NT][4]) {
  constexpr bool kNvfp4 = F == QuantFormat::kNvfp4;
  __nv_bfloat162 scale[2][2];
  // FP8: the block's sums before its scales (stream 0's in registers 0-1 of a tile, stream 1's in 2-3).
  float part[NT][4];
  if constexpr (kNvfp4) group_scales<2>(sc, scale);
  if constexpr (!kNvfp4) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[t][i] = 0.0f;
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // 8 values each: [k + 8w, + 8)
    uint32_t b[2][4];
    decode_word<F, 2>(raw, scale, w, b);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      uint32_t x[4];
      act_pairs(load_or_zero(tok[t] ? tok[t] + k + 8 * w : nullptr), x);
      if constexpr (kNvfp4) {
        mma_bf16(acc[t], b[0][0], b[1][0], b[0][1], b[1][1], x[0], x[1]);
        mma_bf16(acc[t], b[0][2], b[1][2], b[0][3], b[1][3], x[2], x[3]);
      } else {
        mma_bf16(part[t], b[0][0], b[1][0], b[0][1], b[1][1], x[0], x[1]);
        mma_bf16(part[t], b[0][2], b[1][2], b[0][3], b[1][3], x[2], x[3]);
      }
    }
  }
  if constexpr (!kNvfp4) {
    const float f0 = __uint_as_float(sc[0]), f1 = __uint_as_float(sc[1]);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = fmaf(part[t][0], f0, acc[t][0]);
      acc[t][1] = fmaf(part[t][1], f0, acc[t][1]);
      acc[t][2] = fmaf(part[t][2], f1, acc[t][2]);
      acc[t][3] = fmaf(part[t][3], f1, acc[t][3]);
    }
  }
}

// The ring kernels' consumers (grouped_ring.cu, linear_ring.cu): K stages [from, to) from the
// ring's stages it % kRingStages on (`it` counts the stages a warp has taken, across calls). For
// each K block u of a stage, stream s's raw codes of the lane's row row(s) of box box(s) (lane c
// reads its kLoads 16-byte chunks of the row) and its scales (NVFP4: the two e4m3 scales of the
// lane's 32 values, from the stage; FP8: the block scale, from global memory through ref[s]) go to
// dot(raw, sc, k); then the warp frees the stage.
template <QuantFormat F, int S, class Box, class Row, class Dot>
__device__ __forceinline__ void consume_stages(const uint8_t* smem, const RingLayout& L, const ring::Barriers& bars,
                                               int from, int to, int& it, int c, int lane, Box box, Row row,
                                               const quant::RowRef (&ref)[S], Dot&& dot) {
  constexpr int kLoads = MmaLayout<F>::kLoads;
  for (int ks = from; ks < to; ++ks, ++it) {
    const int st = it % kRingStages;
    ring::wait(bars.full(st), (it / kRingStages) & 1);
    const uint8_t* stage = smem + st * L.stage_bytes();
#pragma unroll
    for (int u = 0; u < L.blocks; ++u) {
      const int k = (ks * L.blocks + u) * kBlockK + 32 * c;
      uint4 raw[S][kLoads];
      uint32_t sc[S];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int r = row(s);
        const uint8_t* codes = stage + L.code_box(box(s), u);
#pragma unroll
        for (int l = 0; l < kLoads; ++l)
          raw[s][l] = *reinterpret_cast<const uint4*>(codes + L.chunk(r, kLoads * c + l));
        if constexpr (F == QuantFormat::kNvfp4)
          sc[s] = *reinterpret_cast<const uint16_t*>(stage + L.scale_box(box(s)) + r * L.scale_row +
                                                     u * (kBlockK / 16) + 2 * c);
        else
          sc[s] = quant::load_scales<F>(ref[s], k, kBlockK);
      }
      dot(raw, sc, k);
    }
    __syncwarp();
    if (lane == 0) tma::mbarrier_arrive(bars.empty(st));
  }
}

// The routed experts' kernels walk an expert's pairs in groups of MT tiles of 16 (the MMA's M):
// lo[t] / hi[t] are the activation rows of the lane's two pairs of tile t from pair m0 on (pairs
// m0 + 16t + g and + 8; null past `end`): gate/up read the pair's token's row of x, down the pair's
// own row of act.
template <bool kGateUp, int MT>
__device__ __forceinline__ void tile_rows(const __nv_bfloat16* a, int k_dim, int top_k, const int32_t* sorted, int m0,
                                          int end, int g, const __nv_bfloat16* (&lo)[MT],
                                          const __nv_bfloat16* (&hi)[MT]) {
  auto a_row = [&](int m) { return kGateUp ? sorted[m] / top_k : m; };
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int m_lo = m0 + kTile * t + g, m_hi = m_lo + 8;
    lo[t] = m_lo < end ? a + static_cast<int64_t>(a_row(m_lo)) * k_dim : nullptr;
    hi[t] = m_hi < end ? a + static_cast<int64_t>(a_row(m_hi)) * k_dim : nullptr;
  }
}

// The tiles' results. C fragment: pairs m_lo (acc 0, 1) and m_hi (acc 2, 3), weight rows n0 + 8s +
// 2c and + 1 of stream s. gate/up: act[m, n] = silu(gate · g0) · (up · g1) in bf16 (streams 0 and 1
// the two matrices); down: y[sorted[m], n] = acc · g0 (streams: row groups of 8). g0 / g1: the
// matrices' global scales and the codes' unbias (the group scales were applied in the MMAs). Row
// groups at or past n_dim are not written.
template <bool kGateUp, int S, int MT>
__device__ __forceinline__ void store_tiles(const float (&acc)[S][MT][4], int m0, int end, int g, int c, int n0,
                                            int n_dim, float g0, float g1, const int32_t* sorted,
                                            __nv_bfloat16* act_out, float* y_out) {
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int m_lo = m0 + kTile * t + g, m_hi = m_lo + 8;
    if constexpr (kGateUp) {
      if (n0 >= n_dim) return;
      auto act = [&](float gate, float up) {
        gate *= g0;
        up *= g1;
        return gate / (1.0f + __expf(-gate)) * up;
      };
      if (m_lo < end)
        *reinterpret_cast<__nv_bfloat162*>(act_out + static_cast<int64_t>(m_lo) * n_dim + n0 + 2 * c) =
            __floats2bfloat162_rn(act(acc[0][t][0], acc[1][t][0]), act(acc[0][t][1], acc[1][t][1]));
      if (m_hi < end)
        *reinterpret_cast<__nv_bfloat162*>(act_out + static_cast<int64_t>(m_hi) * n_dim + n0 + 2 * c) =
            __floats2bfloat162_rn(act(acc[0][t][2], acc[1][t][2]), act(acc[0][t][3], acc[1][t][3]));
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (n0 + kRowsPerWarp * s >= n_dim) continue;
        const int n = n0 + kRowsPerWarp * s + 2 * c;
        if (m_lo < end)
          *reinterpret_cast<float2*>(y_out + static_cast<int64_t>(sorted[m_lo]) * n_dim + n) =
              make_float2(acc[s][t][0] * g0, acc[s][t][1] * g0);
        if (m_hi < end)
          *reinterpret_cast<float2*>(y_out + static_cast<int64_t>(sorted[m_hi]) * n_dim + n) =
              make_float2(acc[s][t][2] * g0, acc[s][t][3] * g0);
      }
    }
  }
}

// Weights as A (k_block_dot_wa): tok[t] is the row of the lane's pair m0 + 8t + g (null past `end`).
template <bool kGateUp, int NT>
__device__ __forceinline__ void tile_rows_wa(const __nv_bfloat16* a, int k_dim, int top_k, const int32_t* sorted,
                                             int m0, int end, int g, const __nv_bfloat16* (&tok)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int m = m0 + kRowsPerWarp * t + g;
    tok[t] = m < end ? a + static_cast<int64_t>(kGateUp ? sorted[m] / top_k : m) * k_dim : nullptr;
  }
}

// k_block_dot_wa's results: C of tile t holds, for pairs m0 + 8t + 2c and + 1 (registers 0, 1 and
// 2, 3), stream 0's row g and stream 1's row g. gate/up: act[m, n0 + g]; down: y[sorted[m], n0 + 8s
// + g]. As store_tiles otherwise.
template <bool kGateUp, int NT>
__device__ __forceinline__ void store_tiles_wa(const float (&acc)[NT][4], int m0, int end, int g, int c, int n0,
                                               int n_dim, float g0, float g1, const int32_t* sorted,
                                               __nv_bfloat16* act_out, float* y_out) {
  if (n0 >= n_dim) return;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = m0 + kRowsPerWarp * t + 2 * c + j;
      if (m >= end) continue;
      if constexpr (kGateUp) {
        const float gate = acc[t][j] * g0, up = acc[t][2 + j] * g1;
        act_out[static_cast<int64_t>(m) * n_dim + n0 + g] = __float2bfloat16(gate / (1.0f + __expf(-gate)) * up);
      } else {
        float* y = y_out + static_cast<int64_t>(sorted[m]) * n_dim + n0 + g;
        y[0] = acc[t][j] * g0;
        if (n0 + kRowsPerWarp < n_dim) y[kRowsPerWarp] = acc[t][2 + j] * g0;
      }
    }
  }
}

}  // namespace tessera::ops::cuda::quant_mma
