// Routed experts in NVFP4 or DeepSeek's FP8 block format on tensor cores (W4A16 / W8A16): the pairs
// grouped.cu's prepare kernel sorted by expert, 16 at a time as the M of mma.sync m16n8k16 (bf16
// in, fp32 accumulate), 8 weight rows a warp as its N (down at decode sizes: two groups of 8, sharing
// each activation fragment as gate and up do). The codes become bf16 in registers the way
// Marlin does it: a code's bits shifted under a bf16 exponent give the value times a power of two
// (NVFP4 e2m1: 2^-126; FP8 e4m3: 2^-120), made exact by one bf16 multiply:
//   NVFP4: by the group's e4m3 scale times 2^117 (exact: at most 6 significant bits), the tensor's
//          global scale and 2^9 on the fp32 sums;
//   FP8:   by 2^120; a K block of 128 is one scale block (block_cols 128, 8 rows of a warp in one
//          block row), so its MMAs go to a temporary the block's fp32 scale multiplies into the sums.
// About 2.5 instructions a weight (NVFP4) or 2.5 a byte (FP8) where the CUDA-core kernels (gemv.cu)
// need 6 a weight, and 16 tokens for the price of one. Every step size runs here, prefill included
// (no routing read back to the host): where experts average more than one tile, each decoded
// fragment feeds 4 tiles (64 pairs), so a prefill chunk decodes the weights once per 64 pairs an
// expert instead of dequantizing them to bf16 in memory for cuBLASLt.
//
// K is walked in blocks of 128: lane (g, c) loads values [128 kb + 32 c, + 32) of weight row n0 + g
// (NVFP4: 16 bytes and their two e4m3 scales; FP8: 32 bytes and the block's scale). Each 8 values
// are decoded into the pairs (0, 1), (2, 3), (4, 5), (6, 7) (NVFP4 from the device layout the
// loader repacks the codes into, mma_pairs.h), which become the B fragments of two MMAs; the A
// fragments take the activations of the same K positions, 16 bytes loaded as they lie (the MMA's K
// slots then hold the lanes' values in a permuted order, which a dot product allows as long as
// both operands follow it).
//   gate/up: act[m, n] = silu(x[tok(m)] · Wg[e][n]) · (x[tok(m)] · Wu[e][n]), both matrices in one
//            warp (two accumulators), act bf16 for the down projection
//   down:    y[pair(m), n] = act[m] · Wd[e][n]
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_tiles.cuh"
#include "ops/cuda/kernels/quant/quant_matrix.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

using namespace quant_mma;

// Asks L2 for the 128-byte line holding p (a hint: no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// The K blocks of S weight streams of the same row index, kAhead blocks of loads in flight: each
// block's raw codes and scales go to dot(raw, sc, k) (k: the lane's first value of the block). (A
// cp.async ring in shared memory 4 K blocks deep instead of the kAhead registers measured slower at
// batch 16 and 128 and the same at batch 1; docs/PERFORMANCE.md.)
//
// `prefetch` > 0 (TESSERA_EXPERT_PREFETCH, an experiment): each group of kAhead K blocks first asks
// L2 for the row's bytes `prefetch` K blocks further on (rounded up to whole groups), a hint that
// costs no registers, so that DRAM keeps working while the warp decodes and its own loads then come
// from L2 (the kernel is bound by how long each warp's load-decode-MMA chain takes at its occupancy,
// docs/PERFORMANCE.md).
//
// `wait_first`: the kernel has not waited for the kernel before it yet (the down projection's early
// start, quant_expert_mma_kernel): it does, once the first group's weight loads are in flight and
// before dot() reads any activation.
template <QuantFormat F, int S, int kAhead, typename Dot>
__device__ __forceinline__ void stream_k_blocks(const quant::RowRef (&ref)[S], int k_dim, uint64_t policy, int prefetch,
                                                bool wait_first, Dot&& dot) {
  constexpr bool kNvfp4 = F == QuantFormat::kNvfp4;
  constexpr int kLoads = MmaLayout<F>::kLoads;
  // A group's bytes of one row: at most 256, two 128-byte lines (lanes c = 0, 1); NVFP4 scales one
  // line (lane c = 2).
  constexpr int kGroupBytes = kAhead * (kNvfp4 ? kBlockK / 2 : kBlockK);
  const int c = threadIdx.x & 3;
  const int blocks = k_dim / kBlockK;
  const int ahead = (prefetch + kAhead - 1) / kAhead * kAhead;
  for (int kb0 = 0; kb0 < blocks; kb0 += kAhead) {
    if (ahead > 0 && kb0 + ahead < blocks) {
      const int k = (kb0 + ahead) * kBlockK;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (128 * c < kGroupBytes) prefetch_l2(ref[s].data + quant::row_byte<F>(k) + 128 * c);
        if constexpr (kNvfp4)
          if (c == 2) prefetch_l2(static_cast<const uint8_t*>(ref[s].scale) + k / 16);
      }
    }
    uint4 raw[S][kAhead][kLoads];
    uint32_t sc[S][kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int k = (kb0 + u) * kBlockK + 32 * c;
      const bool in = kb0 + u < blocks;
#pragma unroll
      for (int s = 0; s < S; ++s) {
#pragma unroll
        for (int l = 0; l < kLoads; ++l)
          raw[s][u][l] =
              in ? load_stream(reinterpret_cast<const __nv_bfloat16*>(ref[s].data + quant::row_byte<F>(k) + 16 * l),
                               policy)
                 : make_uint4(0, 0, 0, 0);
        sc[s][u] = in ? quant::load_scales<F>(ref[s], k, kBlockK) : 0u;
      }
    }
    if (wait_first && kb0 == 0) pdl_wait();
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (kb0 + u >= blocks) break;
      uint4 r[S][kLoads];
      uint32_t scales[S];
#pragma unroll
      for (int s = 0; s < S; ++s) {
#pragma unroll
        for (int l = 0; l < kLoads; ++l) r[s][l] = raw[s][u][l];
        scales[s] = sc[s][u];
      }
      dot(r, scales, (kb0 + u) * kBlockK + 32 * c);
    }
  }
}

// K blocks in flight: several tiles give each load 4x the work to hide behind, and their
// accumulators need the registers.
template <QuantFormat F, int MT>
constexpr int kTileAhead = MT == 1                    ? MmaLayout<F>::kAhead
                           : F == QuantFormat::kNvfp4 ? 2
                                                      : 1;

// acc[s][t] += A_t · W_s over all K for the MT tiles of 16 pairs (lo[t]/hi[t]: this lane's two
// pairs' rows of tile t, null past the expert's end), S weight streams of the same row index. Each
// weight fragment is decoded once and multiplied into every tile: at prefill (MT 4) the decode, the
// kernel's main cost, is paid once for 64 pairs instead of once for 16.
template <QuantFormat F, int S, int MT>
__device__ __forceinline__ void tile_dot(const quant::RowRef (&ref)[S], int k_dim, const __nv_bfloat16* const (&lo)[MT],
                                         const __nv_bfloat16* const (&hi)[MT], uint64_t policy, int prefetch,
                                         float (&acc)[S][MT][4], bool wait_first = false) {
  stream_k_blocks<F, S, kTileAhead<F, MT>>(ref, k_dim, policy, prefetch, wait_first,
                                           [&](const uint4(&r)[S][MmaLayout<F>::kLoads], const uint32_t(&scales)[S],
                                               int k) { k_block_dot<F, S, MT>(r, scales, k, lo, hi, acc); });
}

// Weights as the MMA's A operand (quant_mma::k_block_dot_wa; two streams): NT tiles of 8 pairs
// (tok[t]: this lane's pair's row of tile t), the accumulators of NT / 2 tiles of 16 as A.
template <QuantFormat F, int NT>
__device__ __forceinline__ void tile_dot_wa(const quant::RowRef (&ref)[2], int k_dim,
                                            const __nv_bfloat16* const (&tok)[NT], uint64_t policy, int prefetch,
                                            float (&acc)[NT][4], bool wait_first) {
  stream_k_blocks<F, 2, kTileAhead<F, NT <= 2 ? 1 : NT / 2>>(
      ref, k_dim, policy, prefetch, wait_first,
      [&](const uint4(&r)[2][MmaLayout<F>::kLoads], const uint32_t(&scales)[2], int k) {
        k_block_dot_wa<F, NT>(r, scales, k, tok, acc);
      });
}

// One block per (kRowsPerBlock weight rows, active expert), over all of the expert's pairs in
// groups of MT tiles of 16; kWeightsA (two streams: gate and up, or down's two row groups): the
// weights as the MMA's A operand, passes of one tile of 8 pairs for experts of up to 8, else of 2 MT
// tiles (16 MT pairs, as grouped_ring.cu).
template <QuantFormat F, bool kGateUp, int MT, int kDownGroups = 1, bool kWeightsA = false, bool kEarly = false>
__global__ void __launch_bounds__(kWarps * 32)
    quant_expert_mma_kernel(const __nv_bfloat16* __restrict__ a, int top_k, const int32_t* __restrict__ sorted,
                            const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                            const int32_t* __restrict__ num_active, const QuantMatrix* __restrict__ w0,
                            const QuantMatrix* __restrict__ w1, __nv_bfloat16* __restrict__ act_out,
                            float* __restrict__ y_out, int prefetch) {
  // Launched with launch_dependent. Down with kEarly (TESSERA_EXPERT_EARLY_DOWN): the routing comes
  // from the prepare kernel before gate/up, which had completed when gate/up's blocks passed their
  // wait, and this kernel's blocks start only after that (launch.cuh), so the routing and the
  // weights are read before the wait and only the activations (gate/up's output) after it: the first
  // K blocks' loads then overlap gate/up's last blocks.
  static_assert(!(kGateUp && kEarly), "gate/up reads the routing of the kernel just before it");
  if constexpr (!kEarly) pdl_wait();
  if (static_cast<int>(blockIdx.y) >= load_routing<kEarly>(num_active)) {
    if constexpr (kEarly) pdl_wait();
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int e = load_routing<kEarly>(active + blockIdx.y);
  const QuantMatrix& m0 = w0[e];
  const int n_dim = m0.n, k_dim = m0.k;
  // down: kDownGroups row groups of 8 a warp, sharing each activation fragment
  constexpr int kWarpRows = kGateUp ? kRowsPerWarp : kRowsPerWarp * kDownGroups;
  const int n0 = static_cast<int>(blockIdx.x) * kWarps * kWarpRows + warp * kWarpRows;
  // (A warp past the rows may leave before the wait with kEarly: the block's other warps, and the
  // grid's other blocks, still wait, so the grid cannot complete first. A wait on this path cost
  // the kernel 40 registers.)
  if (n0 >= n_dim) return;
  const int begin = load_routing<kEarly>(offsets + e), end = load_routing<kEarly>(offsets + e + 1);
  bool wait_first = kEarly;  // the first pass waits after its first loads
  constexpr int S = kGateUp ? 2 : kDownGroups;
  quant::RowRef ref[S];
  if constexpr (kGateUp) {
    ref[0] = quant::row_ref<F>(m0, n0 + g);
    ref[1] = quant::row_ref<F>(w1[e], n0 + g);
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) ref[s] = quant::row_ref<F>(m0, n0 + kRowsPerWarp * s + g);
  }
  const uint64_t policy = l2_evict_first_policy();
  // The group scales' kUnscale is not used here: the codes were made exact (NVFP4 times 2^-9)
  // before the MMA.
  const float g0 = m0.global_scale * MmaLayout<F>::kSumUnbias;
  const float g1 = kGateUp ? w1[e].global_scale * MmaLayout<F>::kSumUnbias : 0.0f;
  if constexpr (kWeightsA) {
    static_assert(S == 2, "weights as A: two streams");
    auto pass = [&](int m0i, auto nt) {
      constexpr int NT = decltype(nt)::value;
      const __nv_bfloat16* tok[NT];
      tile_rows_wa<kGateUp, NT>(a, k_dim, top_k, sorted, m0i, end, g, tok);
      float acc[1][NT][4];
      zero(acc);
      tile_dot_wa<F, NT>(ref, k_dim, tok, policy, prefetch, acc[0], wait_first);
      wait_first = false;
      store_tiles_wa<kGateUp, NT>(acc[0], m0i, end, g, c, n0, n_dim, g0, g1, sorted, act_out, y_out);
    };
    if (end - begin <= kRowsPerWarp) {
      pass(begin, std::integral_constant<int, 1>{});
    } else {
      for (int m0i = begin; m0i < end; m0i += 2 * MT * kRowsPerWarp) pass(m0i, std::integral_constant<int, 2 * MT>{});
    }
  } else {
    for (int m0i = begin; m0i < end; m0i += kTile * MT) {
      const __nv_bfloat16* lo[MT];
      const __nv_bfloat16* hi[MT];
      tile_rows<kGateUp, MT>(a, k_dim, top_k, sorted, m0i, end, g, lo, hi);
      float acc[S][MT][4];
      zero(acc);
      tile_dot<F, S, MT>(ref, k_dim, lo, hi, policy, prefetch, acc, wait_first);
      wait_first = false;
      store_tiles<kGateUp, S, MT>(acc, m0i, end, g, c, n0, n_dim, g0, g1, sorted, act_out, y_out);
    }
  }
  if (wait_first) pdl_wait();  // (an expert without pairs: not active, but every block waits)
}

// A dense projection of 2-16 tokens on the same tiles, y [tokens, n] = x [tokens, k] · Wᵀ, with
// activations that are not rounded: x = hi + lo (bf16 each, to ~2^-17), a tile's 16 MMA rows are 8
// tokens' hi (rows g) and lo (rows g + 8), and the epilogue adds the two sums. (Rounding x to bf16
// with exact weights flipped an expert choice of the FP8 fixture, docs/PERFORMANCE.md; at <= 8
// tokens the lo rows cost no MMAs, the tile would be padding there.) A block is kWarps / slices row
// groups of 8 and MT tiles (8 MT tokens) that share each decoded weight fragment; the `slices`
// warps of a group split K and add their sums in shared memory (short matrices would leave most
// SMs idle with a warp per row group).
template <QuantFormat F, int MT>
__global__ void __launch_bounds__(kWarps * 32)
    quant_linear_mma_kernel(const __nv_bfloat16* __restrict__ x_hi, const __nv_bfloat16* __restrict__ x_lo, int tokens,
                            const QuantMatrix w, int slices, float* __restrict__ y, int prefetch) {
  __shared__ float4 part[kWarps][MT][32];
  pdl_wait();  // first: launched with launch_dependent
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int group = warp / slices, slice = warp % slices;
  const int n0 = (static_cast<int>(blockIdx.y) * (kWarps / slices) + group) * kRowsPerWarp;
  const bool rows = n0 < w.n;                                                    // n % 8 == 0
  const int m_first = static_cast<int>(blockIdx.x) * kDenseTileTokens * MT + g;  // token of tile 0's rows g
  float acc[1][MT][4] = {};
  if (rows) {
    const int blocks = w.k / kBlockK, per = (blocks + slices - 1) / slices;
    const int kb_begin = min(blocks, slice * per), kb_end = min(blocks, kb_begin + per);
    const int k0 = kb_begin * kBlockK;
    const quant::RowRef ref[1] = {quant::advance<F>(quant::row_ref<F>(w, n0 + g), k0, w.block_cols)};
    const __nv_bfloat16* hi[MT];
    const __nv_bfloat16* lo[MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const int m = m_first + kDenseTileTokens * t;
      const int64_t row = static_cast<int64_t>(m) * w.k + k0;
      hi[t] = m < tokens ? x_hi + row : nullptr;
      lo[t] = m < tokens ? x_lo + row : nullptr;
    }
    if (kb_end > kb_begin)
      tile_dot<F, 1, MT>(ref, (kb_end - kb_begin) * kBlockK, hi, lo, l2_evict_first_policy(), prefetch, acc);
  }
  if (slices > 1) {
#pragma unroll
    for (int t = 0; t < MT; ++t)
      part[warp][t][lane] = make_float4(acc[0][t][0], acc[0][t][1], acc[0][t][2], acc[0][t][3]);
    __syncthreads();
    if (slice != 0) return;
    for (int s = 1; s < slices; ++s) {
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float4 p = part[warp + s][t][lane];
        acc[0][t][0] += p.x, acc[0][t][1] += p.y, acc[0][t][2] += p.z, acc[0][t][3] += p.w;
      }
    }
  }
  if (!rows) return;
  // Rows g (hi) and g + 8 (lo) of a tile's C fragment are the same token: weight rows n0 + 2c, + 1.
  const float f = w.global_scale * MmaLayout<F>::kSumUnbias;
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int m = m_first + kDenseTileTokens * t;
    if (m < tokens)
      *reinterpret_cast<float2*>(y + static_cast<int64_t>(m) * w.n + n0 + 2 * c) =
          make_float2((acc[0][t][0] + acc[0][t][2]) * f, (acc[0][t][1] + acc[0][t][3]) * f);
  }
}

template <QuantFormat F, int MT, bool kWeightsA = false>
void launch_expert_kernels(const MoeGroupedScratch& s, int top_k, unsigned expert_slots, int64_t hidden, int64_t inter,
                           const QuantMatrix* gate_w, const QuantMatrix* up_w, const QuantMatrix* down_w,
                           cudaStream_t stream) {
  launch_dependent(quant_expert_mma_kernel<F, true, MT, 1, kWeightsA>,
                   dim3(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots), kWarps * 32,
                   0, stream, static_cast<const __nv_bfloat16*>(s.xb), top_k, s.sorted, s.offsets, s.active,
                   s.num_active, gate_w, up_w, s.act, static_cast<float*>(nullptr), expert_prefetch_blocks());
  // Decode sizes: two row groups a warp share each activation fragment (NVFP4 slope at batch 1 / 16 /
  // 128 240 -> 233, 1479 -> 1406, 5088 -> 4851 µs a layer; FP8 the same within 1%, H200); with the
  // weights as A at every size (they are A's two halves).
  // TESSERA_EXPERT_EARLY_DOWN: the decode-size instance that starts before gate/up has finished.
  const bool early = expert_early_down();
  auto down_kernel = quant_expert_mma_kernel<F, false, MT, 1>;
  int64_t down_rows = kRowsPerBlock;
  if constexpr (MT == 1 || kWeightsA) {
    if (hidden % (2 * kRowsPerWarp) == 0) {
      down_kernel = early ? quant_expert_mma_kernel<F, false, MT, 2, kWeightsA, true>
                          : quant_expert_mma_kernel<F, false, MT, 2, kWeightsA>;
      down_rows = 2 * kRowsPerBlock;
    }
  }
  launch_dependent(down_kernel, dim3(static_cast<unsigned>((hidden + down_rows - 1) / down_rows), expert_slots),
                   kWarps * 32, 0, stream, static_cast<const __nv_bfloat16*>(s.act), top_k, s.sorted, s.offsets,
                   s.active, s.num_active, down_w, static_cast<const QuantMatrix*>(nullptr),
                   static_cast<__nv_bfloat16*>(nullptr), s.y, expert_prefetch_blocks());
}

// Tiles of 16 pairs an expert at decode; at prefill sizes (more than one tile an expert on average)
// 64 pairs share each decoded weight fragment. The weights are the MMA's A operand unless
// TESSERA_EXPERT_WEIGHTS_A=0.
template <QuantFormat F>
void launch_experts(const MoeGroupedScratch& s, int top_k, unsigned expert_slots, int64_t pairs, int64_t hidden,
                    int64_t inter, const QuantMatrix* gate_w, const QuantMatrix* up_w, const QuantMatrix* down_w,
                    cudaStream_t stream) {
  const bool prefill = pairs > kTile * static_cast<int64_t>(expert_slots);
  if (!prefill) {
    if (expert_weights_a())
      launch_expert_kernels<F, 1, true>(s, top_k, expert_slots, hidden, inter, gate_w, up_w, down_w, stream);
    else
      launch_expert_kernels<F, 1>(s, top_k, expert_slots, hidden, inter, gate_w, up_w, down_w, stream);
    return;
  }
  // FP8 prefill keeps the activations as A: with the weights as A, 8 tiles' sums and their per-block
  // partial sums take 64 registers (255 and spills, against 178 and none).
  if constexpr (F == QuantFormat::kNvfp4) {
    if (expert_weights_a()) {
      launch_expert_kernels<F, 4, true>(s, top_k, expert_slots, hidden, inter, gate_w, up_w, down_w, stream);
      return;
    }
  }
  launch_expert_kernels<F, 4>(s, top_k, expert_slots, hidden, inter, gate_w, up_w, down_w, stream);
}

bool mma_shape_ok(const QuantMatrix& m) {
  if (m.k % kBlockK != 0 || m.n % kRowsPerWarp != 0) return false;
  // FP8: a K block is one scale column, a warp's rows one scale row.
  return m.format == QuantFormat::kNvfp4 || (m.block_cols == kBlockK && m.block_rows % kRowsPerWarp == 0);
}

}  // namespace

bool moe_quant_mma_supported(const QuantMatrix& gate, const QuantMatrix& down) {
  return gate.format == down.format && mma_shape_ok(gate) && mma_shape_ok(down);
}

void launch_moe_quant_mma_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots,
                                  int64_t experts, QuantFormat format, const QuantMatrix* gate_w,
                                  const QuantMatrix* up_w, const QuantMatrix* down_w, int64_t inter,
                                  const MoeGroupedScratch& s, cudaStream_t stream) {
  const int64_t pairs = tokens * slots.per_token();
  if (pairs == 0) return;
  launch_moe_prepare(x, tokens, hidden, slots, experts, s, stream);
  const unsigned expert_slots = static_cast<unsigned>(std::min<int64_t>(experts, pairs));
  if (format == QuantFormat::kNvfp4)
    launch_experts<QuantFormat::kNvfp4>(s, slots.per_token(), expert_slots, pairs, hidden, inter, gate_w, up_w, down_w,
                                        stream);
  else
    launch_experts<QuantFormat::kFp8Block>(s, slots.per_token(), expert_slots, pairs, hidden, inter, gate_w, up_w,
                                           down_w, stream);
}

bool quant_linear_mma_supported(const QuantMatrix& w) { return mma_shape_ok(w); }

namespace {

template <QuantFormat F, int MT>
void launch_linear_tiles(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo, int64_t tokens,
                         float* y, int num_sms, cudaStream_t stream) {
  // Split K (up to a warp a K block) until the grid fills two blocks an SM, the kernel's occupancy.
  const int64_t row_groups = w.n / kRowsPerWarp, tiles = (tokens + kDenseTileTokens * MT - 1) / (kDenseTileTokens * MT),
                k_blocks = w.k / kBlockK;
  auto blocks = [&](int slices) { return (row_groups + kWarps / slices - 1) / (kWarps / slices); };
  int slices = 1;
  while (slices < kWarps && 2 * slices <= k_blocks && blocks(slices) * tiles < 2 * num_sms) slices *= 2;
  // Tiles fastest: the blocks of one weight row group run together and share its reads in L2.
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(blocks(slices)));
  launch_dependent(quant_linear_mma_kernel<F, MT>, grid, kWarps * 32, 0, stream, x_hi, x_lo, static_cast<int>(tokens),
                   w, slices, y, expert_prefetch_blocks());
}

// 8 tokens a tile. Two tiles share each decoded weight fragment where the second holds at most 4
// tokens: a full second tile doubles the activation loads a weight byte costs, and at 16 tokens the
// FP8 o_proj took 241 µs with shared fragments against 174 µs as two blocks of one tile each (H200).
template <QuantFormat F>
void launch_linear(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo, int64_t tokens, float* y,
                   int num_sms, cudaStream_t stream) {
  if (tokens > kDenseTileTokens && tokens <= kDenseTileTokens + 4)
    launch_linear_tiles<F, 2>(w, x_hi, x_lo, tokens, y, num_sms, stream);
  else
    launch_linear_tiles<F, 1>(w, x_hi, x_lo, tokens, y, num_sms, stream);
}

}  // namespace

void launch_quant_linear_mma(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo, int64_t tokens,
                             float* y, int num_sms, cudaStream_t stream) {
  if (tokens == 0) return;
  if (w.format == QuantFormat::kNvfp4)
    launch_linear<QuantFormat::kNvfp4>(w, x_hi, x_lo, tokens, y, num_sms, stream);
  else
    launch_linear<QuantFormat::kFp8Block>(w, x_hi, x_lo, tokens, y, num_sms, stream);
}

}  // namespace tessera::ops::cuda
