// The bf16 routed experts' tensor-core projections with the weights as the MMA's A operand
// (TESSERA_MOE_GROUPED_WA; grouped.cu has the activations as A). grouped.cu's tiles put 16 pairs'
// activations in A and 8 weight rows in B: every 32-wide K chunk a warp loads 512 bytes of weights
// and, per tile, 1 KB of activations gathered from 16 rows (through L1: one load touches 8 rows),
// and at batch 128 over 64 experts (16 pairs an expert) its kernels streamed at about a third of
// the copy rate. Here a warp's two streams of 8 rows fill A's 16 rows (gate/up: the same rows of both
// matrices, so one MMA serves both and the silu(gate) * up is taken in registers; down: two row
// groups of 8) and the pairs are B's 8 columns, each lane loading its pair g's 16 bytes: a K chunk
// is 1 KB of weights and 512 bytes of activations a tile of 8 pairs. A pass takes up to 4 tiles (32
// pairs), so an expert of up to 32 pairs streams its weights once. quant/grouped_ring.cu's consumers
// do the same with quantized weights (quant_mma::k_block_dot_wa); the tile rows and stores are theirs.
//
// Without a K split (many experts with work) gate/up writes act itself; with one (few experts: the
// shared expert alone, the heavy experts of a step the matrix-vector kernels mostly take), it writes
// fp32 partial sums in grouped.cu's layout and grouped.cu's finish kernel takes silu(gate) * up.
// Where experts average more pairs than a pass takes (the shared expert alone: every token), the
// passes of an expert run in parallel blocks (pair groups; TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0: one
// after another in one block): the blocks of a row group read the same weights at about the same
// time, the repeats from L2. The shared expert alone at 128 tokens: 354 -> 152 us on an H100.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_tiles.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

using quant_mma::kRowsPerWarp;  // 8: a stream's rows a warp
using quant_mma::load_or_zero;
using quant_mma::store_tiles_wa;
using quant_mma::tile_rows_wa;

constexpr int kWarps = 8;
constexpr int kUnroll = 4;    // 32-wide K chunks of both streams in flight a warp: 4 x 1 KB
constexpr int kMaxTiles = 4;  // tiles of 8 pairs a pass

// Rows of the output a block covers: gate/up 8 a warp (of both matrices), down 16 (two groups).
template <bool kGateUp>
__host__ __device__ constexpr int rows_per_block() {
  return kWarps * (kGateUp ? kRowsPerWarp : 2 * kRowsPerWarp);
}

// acc[t] += W(16 rows: r0's 8, r1's 8) · A(tile t's 8 pairs)ᵀ over K [k_begin, k_end): lane (g, c)
// holds K values [k + 8c, + 8) of each 32-wide chunk k of its rows g (r0, r1 already offset by 8c)
// and of its pair g of each tile (tok[t], offset by 8c; null past the expert's end).
template <int NT>
__device__ __forceinline__ void stream_k(const __nv_bfloat16* r0, const __nv_bfloat16* r1,
                                         const __nv_bfloat16* const (&tok)[NT], int k_begin, int k_end, uint64_t policy,
                                         float (&acc)[NT][4]) {
  auto dot = [&](int k, const uint4& w0, const uint4& w1) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 x = load_or_zero(tok[t] ? tok[t] + k : nullptr);
      mma::mma_bf16(acc[t], w0.x, w1.x, w0.y, w1.y, x.x, x.y);
      mma::mma_bf16(acc[t], w0.z, w1.z, w0.w, w1.w, x.z, x.w);
    }
  };
  int k = k_begin;
  for (; k + 32 * kUnroll <= k_end; k += 32 * kUnroll) {
    uint4 w0[kUnroll], w1[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      w0[u] = load_stream(r0 + k + 32 * u, policy);
      w1[u] = load_stream(r1 + k + 32 * u, policy);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dot(k + 32 * u, w0[u], w1[u]);
  }
  for (; k < k_end; k += 32) dot(k, load_stream(r0 + k, policy), load_stream(r1 + k, policy));
}

// One projection of the sorted pairs of expert active[blockIdx.y]: gate/up (kGateUp: w0 gate, w1
// up, both [n_dim = inter, k_dim = hidden], reading x rows sorted[m] / top_k) or down (w0 [n_dim =
// hidden, k_dim = inter], reading act rows m, writing y rows sorted[m]). gridDim.z > 1 (gate/up
// only) splits K: slice z writes its gate and up sums to part + z · slice and part + (splits + z) ·
// slice (slice = pairs · inter) for grouped.cu's finish kernel. blockIdx.z / splits is the block's
// pair group: its passes are those of pairs begin + 32 (group + groups · i). Experts of fewer than
// min_pairs pairs are the matrix-vector kernels'.
#define TESSERA_WA_PARAMS                                                                                              \
  const __nv_bfloat16 *__restrict__ a, int k_dim, int top_k, const int32_t *__restrict__ sorted,                       \
      const int32_t *__restrict__ offsets, const int32_t *__restrict__ active, const int32_t *__restrict__ num_active, \
      const __nv_bfloat16 *const *__restrict__ w0, const __nv_bfloat16 *const *__restrict__ w1, int n_dim,             \
      __nv_bfloat16 *__restrict__ act_out, float *__restrict__ out, int64_t slice, int splits, int min_pairs
#define TESSERA_WA_ARGS \
  a, k_dim, top_k, sorted, offsets, active, num_active, w0, w1, n_dim, act_out, out, slice, splits, min_pairs
template <bool kGateUp>
__device__ __forceinline__ void expert_wa(TESSERA_WA_PARAMS) {
  if (static_cast<int>(blockIdx.y) >= *num_active) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * rows_per_block<kGateUp>() + warp * (kGateUp ? kRowsPerWarp : 2 * kRowsPerWarp);
  if (n0 >= n_dim) return;
  const int e = active[blockIdx.y];
  const int begin = offsets[e], end = offsets[e + 1];
  const int z = static_cast<int>(blockIdx.z) % splits, group = static_cast<int>(blockIdx.z) / splits;
  const int groups = static_cast<int>(gridDim.z) / splits;
  float* gate_part = out + static_cast<int64_t>(z) * slice;
  float* up_part = out + static_cast<int64_t>(splits + z) * slice;
  if (end - begin < min_pairs) {
    // The matrix-vector kernels take this expert. Partial sums are zeroed, so that the finish
    // kernel reads defined values for its rows (act is rewritten there afterwards).
    if constexpr (kGateUp) {
      if (splits > 1 && group == 0)
        for (int m = begin + g; m < end; m += 8)
          for (int j = c; j < kRowsPerWarp; j += 4) {
            gate_part[static_cast<int64_t>(m) * n_dim + n0 + j] = 0.0f;
            up_part[static_cast<int64_t>(m) * n_dim + n0 + j] = 0.0f;
          }
    }
    return;
  }
  const __nv_bfloat16* r0 = w0[e] + static_cast<int64_t>(n0 + g) * k_dim + 8 * c;
  const __nv_bfloat16* r1 = kGateUp ? w1[e] + static_cast<int64_t>(n0 + g) * k_dim + 8 * c
                                    : w0[e] + static_cast<int64_t>(n0 + kRowsPerWarp + g) * k_dim + 8 * c;
  const uint64_t policy = l2_evict_first_policy();
  const int k_len = k_dim / splits, k_begin = z * k_len;
  auto pass = [&](int m0, auto nt) {
    constexpr int NT = decltype(nt)::value;
    const __nv_bfloat16* tok[NT];
    tile_rows_wa<kGateUp, NT>(a, k_dim, top_k, sorted, m0, end, g, tok);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      if (tok[t]) tok[t] += 8 * c;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    stream_k<NT>(r0, r1, tok, k_begin, k_begin + k_len, policy, acc);
    if (!kGateUp || splits == 1) {
      store_tiles_wa<kGateUp, NT>(acc, m0, end, g, c, n0, n_dim, 1.0f, 1.0f, sorted, act_out, out);
    } else if constexpr (kGateUp) {
      // C of tile t: pairs m0 + 8t + 2c + j (registers j and 2 + j), gate's row g and up's row g.
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int m = m0 + kRowsPerWarp * t + 2 * c + j;
          if (m >= end) continue;
          gate_part[static_cast<int64_t>(m) * n_dim + n0 + g] = acc[t][j];
          up_part[static_cast<int64_t>(m) * n_dim + n0 + g] = acc[t][2 + j];
        }
    }
  };
  constexpr int kPass = kRowsPerWarp * kMaxTiles;
  for (int m0 = begin + group * kPass; m0 < end; m0 += groups * kPass) {
    const int tiles = (min(end - m0, kPass) + kRowsPerWarp - 1) / kRowsPerWarp;
    if (tiles == 1)
      pass(m0, std::integral_constant<int, 1>{});
    else if (tiles == 2)
      pass(m0, std::integral_constant<int, 2>{});
    else if (tiles == 3)
      pass(m0, std::integral_constant<int, 3>{});
    else
      pass(m0, std::integral_constant<int, 4>{});
  }
}

// The kernels: registers as ptxas chooses (104-110 on sm_90a, 2 blocks an SM), or capped at 80 for 3
// blocks (24 warps) an SM, at the price of spills (TESSERA_MOE_GROUPED_WA_THREE_BLOCKS, an
// experiment: more weight loads in flight an SM).
template <bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32) expert_wa_kernel(TESSERA_WA_PARAMS) {
  expert_wa<kGateUp>(TESSERA_WA_ARGS);
}
template <bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32, 3) expert_wa_3_kernel(TESSERA_WA_PARAMS) {
  expert_wa<kGateUp>(TESSERA_WA_ARGS);
}
#undef TESSERA_WA_PARAMS
#undef TESSERA_WA_ARGS
int num_sms() {
  static const int n = [] {
    int device = 0, sms = 1;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return sms;
  }();
  return n;
}

}  // namespace

int64_t moe_wa_gate_up_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter, int64_t expert_slots) {
  // Enough (row group, expert) blocks for 4 an SM without a split (batch 128 over 64 experts: 32 x
  // 64): none, and act comes straight from the kernel; else grouped.cu's choice.
  const int64_t blocks = (inter + rows_per_block<true>() - 1) / rows_per_block<true>() * expert_slots;
  return blocks >= 4 * num_sms() ? 1 : moe_grouped_gate_up_splits(tokens, pairs, hidden, inter);
}

unsigned moe_wa_pair_groups(int64_t pairs, unsigned expert_slots) {
  if (!moe_grouped_wa_pair_groups()) return 1;
  const int64_t per_expert = (pairs + expert_slots - 1) / expert_slots;
  const int64_t pass = kRowsPerWarp * kMaxTiles;
  return static_cast<unsigned>(std::clamp<int64_t>((per_expert + pass - 1) / pass, 1, 8));
}

void launch_moe_wa_gate_up(const __nv_bfloat16* x, int64_t hidden, int64_t top_k, const MoeGroupedScratch& s,
                           unsigned expert_slots, int min_pairs, int64_t splits, const __nv_bfloat16* const* gate_w,
                           const __nv_bfloat16* const* up_w, int64_t inter, int64_t pairs, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>((inter + rows_per_block<true>() - 1) / rows_per_block<true>()), expert_slots,
            static_cast<unsigned>(splits) * moe_wa_pair_groups(pairs, expert_slots));
  const auto gate_up_kernel = moe_grouped_wa_three_blocks() ? expert_wa_3_kernel<true> : expert_wa_kernel<true>;
  launch_plain(gate_up_kernel, grid, kWarps * 32, 0, stream, x, static_cast<int>(hidden), static_cast<int>(top_k),
               s.sorted, s.offsets, s.active, s.num_active, gate_w, up_w, static_cast<int>(inter), s.act,
               s.gate_up_part, pairs * inter, static_cast<int>(splits), min_pairs);
}

void launch_moe_wa_down(int64_t hidden, int64_t top_k, const MoeGroupedScratch& s, unsigned expert_slots, int min_pairs,
                        const __nv_bfloat16* const* down_w, int64_t inter, int64_t pairs, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>((hidden + rows_per_block<false>() - 1) / rows_per_block<false>()), expert_slots,
            moe_wa_pair_groups(pairs, expert_slots));
  const auto down_kernel = moe_grouped_wa_three_blocks() ? expert_wa_3_kernel<false> : expert_wa_kernel<false>;
  launch_plain(down_kernel, grid, kWarps * 32, 0, stream, s.act, static_cast<int>(inter), static_cast<int>(top_k),
               s.sorted, s.offsets, s.active, s.num_active, down_w, static_cast<const __nv_bfloat16* const*>(nullptr),
               static_cast<int>(hidden), static_cast<__nv_bfloat16*>(nullptr), s.y, int64_t{0}, 1, min_pairs);
}

}  // namespace tessera::ops::cuda
