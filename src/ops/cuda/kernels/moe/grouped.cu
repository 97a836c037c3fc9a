// Routed experts on the device without a host round trip (decode-sized steps): the (token, slot)
// pairs are sorted by expert, then grouped projections read each routed expert's weights once for
// all of its tokens:
//   gate, up: g[m] = x[t] · Wg[e]ᵀ, u[m] = x[t] · Wu[e]ᵀ for every sorted pair m of expert e
//             (fp32, split over the hidden dimension for few tokens), act[m] = silu(g[m]) * u[m]
//   down:     y[pair] = act[m] · Wd[e]ᵀ
// and a combine adds Σ_k w[t, k] · y[t, k] in slot order (deterministic whatever order the sort
// produced). The tensor-core projections are grouped_wa.cu's (the weights as the MMA's A operand:
// 2.0x these at batch 128 over 64 experts on an H200) unless TESSERA_MOE_GROUPED_WA=0 picks the
// ones here. Decode is bound by reading expert weights, so the GEMM kernels stream the weight rows
// straight from global memory with 16-byte loads into mma.sync B fragments (no shared memory, no
// block barriers), 16 tokens per MMA tile. Inside each 32-wide K chunk a lane holds 8 consecutive K
// values; the MMA's logical K slots are permuted the same way for A and B, which a dot product
// allows.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "ops/cuda/kernels/common/float4_access.h"
#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

using mma::mma_bf16;

constexpr int kMaxExperts = 1024;
constexpr int kWarpsPerBlock = 8;
constexpr int kRowsPerWarp = 8;  // MMA N
constexpr int kRowsPerBlock = kWarpsPerBlock * kRowsPerWarp;
constexpr int kUnroll = 8;  // 32-wide K chunks loaded ahead (memory-level parallelism)

__device__ inline uint4 load_or_zero(const __nv_bfloat16* p) {
  return p ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

// Two MMAs over one 32-wide K chunk: lane (g, c) holds K values [8c, 8c + 8) of A rows g and
// g + 8 (alo, ahi) and of weight row g (w).
__device__ inline void mma_chunk(float (&acc)[4], const uint4& alo, const uint4& ahi, const uint4& w) {
  mma_bf16(acc, alo.x, ahi.x, alo.y, ahi.y, w.x, w.y);
  mma_bf16(acc, alo.z, ahi.z, alo.w, ahi.w, w.z, w.w);
}

// Block-wide exclusive scan of one value per thread (blockDim.x == 1024).
__device__ int block_exclusive_scan(int v, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int s = warp_sums[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += n;
    }
    warp_sums[lane] = s;  // inclusive sums of the warps
  }
  __syncthreads();
  return incl - v + (warp > 0 ? warp_sums[warp - 1] : 0);
}

// Block 0 (1024 threads): counts per expert, offsets, the list of experts with work, and the
// pairs sorted by expert (and, where pair_row is given, each pair's place in that order, 0 for a
// dropped one). Pairs with an id outside [0, experts) (the router cannot produce them) or of an
// expert another tensor-parallel rank holds (slots.held) are dropped; the combine skips them too.
// The other blocks convert x to bf16 for the projections, 8 values a thread (one launch where the
// step had three: slot append, conversion, sort).
constexpr int kConvertPerBlock = 1024 * 8;
__global__ void __launch_bounds__(1024)
    prepare_kernel(MoeSlots slots, int pairs, int experts, int32_t* offsets, int32_t* active, int32_t* num_active,
                   int32_t* sorted, int32_t* pair_row, const float* __restrict__ x, int64_t x_elems,
                   __nv_bfloat16* __restrict__ xb) {
  pdl_wait();  // first: launched with launch_dependent
  if (blockIdx.x > 0) {
    const int64_t base = (static_cast<int64_t>(blockIdx.x) - 1) * kConvertPerBlock + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t i = base + j * 1024;
      if (i < x_elems) xb[i] = __float2bfloat16_rn(x[i]);
    }
    return;
  }
  __shared__ int counts[kMaxExperts], fill[kMaxExperts], warp_sums[32], n_active;
  const int e = threadIdx.x;
  counts[e] = 0;
  fill[e] = 0;
  if (e == 0) n_active = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int id = slots.id(i);
    if (slots.computed(id, experts)) atomicAdd(&counts[id], 1);
  }
  __syncthreads();
  const int count = counts[e];
  const int offset = block_exclusive_scan(count, warp_sums);
  __syncthreads();
  counts[e] = offset;  // reused as the start of expert e
  if (e < experts) {
    offsets[e] = offset;
    if (count > 0) active[atomicAdd(&n_active, 1)] = e;
  }
  if (e == experts - 1) offsets[experts] = offset + count;
  __syncthreads();
  if (e == 0) *num_active = n_active;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int id = slots.id(i);
    const bool computed = slots.computed(id, experts);
    const int at = computed ? counts[id] + atomicAdd(&fill[id], 1) : 0;
    if (computed) sorted[at] = i;
    if (pair_row) pair_row[i] = at;
  }
}

// One projection of the sorted pairs of expert active[blockIdx.y] through its weight W[e] [N, K]:
//   out[row(m), n] = A[a_row(m)] · W[e][n]  for this warp's 8 rows n,
// a_row(m) = sorted[m] / top_k (the token: gate and up read x) or m (down reads act), row(m) = m or
// sorted[m] (down writes each pair's own row). gridDim.z > 1 splits K: slice z writes its partial
// sums to out + z · out_slice. Each warp streams 8 weight rows (gate and up are separate launches:
// 16 rows 14 KB apart per warp ran at ~57% of the bandwidth, 8 at ~80%). MT tiles of 16 pairs
// share each weight fragment (moe_grouped_tiles), so an expert's weights are streamed once per 16 MT
// pairs: with MT = 1 an expert of 17-32 pairs (batch 128 over 64 experts averages 16) streams them
// twice. A tile's sums are the same MMAs in the same order whatever MT.
template <bool kTokenRows, bool kPairRowsOut, int MT>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    expert_project_kernel(const __nv_bfloat16* __restrict__ a, int k_dim, int top_k, const int32_t* __restrict__ sorted,
                          const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                          const int32_t* __restrict__ num_active, const __nv_bfloat16* const* __restrict__ w, int n_dim,
                          float* __restrict__ out, int64_t out_slice, int min_pairs) {
  if (static_cast<int>(blockIdx.y) >= *num_active) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp;
  if (n0 >= n_dim) return;
  const int e = active[blockIdx.y];
  const int begin = offsets[e], end = offsets[e + 1];
  float* out_z = out + static_cast<int64_t>(blockIdx.z) * out_slice;
  if (end - begin < min_pairs) {
    // The matrix-vector kernels take this expert. Gate/up partials are zeroed, so that the finish
    // kernel reads defined values for its rows (act is rewritten there afterwards).
    if (!kPairRowsOut)
      for (int m = begin + g; m < end; m += 8)
        *reinterpret_cast<float2*>(out_z + static_cast<int64_t>(m) * n_dim + n0 + 2 * c) = make_float2(0.0f, 0.0f);
    return;
  }
  const __nv_bfloat16* wr = w[e] + static_cast<int64_t>(n0 + g) * k_dim + 8 * c;
  const uint64_t policy = l2_evict_first_policy();
  const int k_len = k_dim / static_cast<int>(gridDim.z), k_begin = static_cast<int>(blockIdx.z) * k_len;
  const int k_end = k_begin + k_len;
  auto a_row = [&](int m) { return kTokenRows ? sorted[m] / top_k : m; };
  for (int m0 = begin; m0 < end; m0 += 16 * MT) {
    // Tile mt: pairs m0 + 16 mt + g and + 8 (rows past the expert's end are zeros).
    const int tiles = min(MT, (end - m0 + 15) / 16);  // the same for every lane
    const __nv_bfloat16* alo_p[MT];
    const __nv_bfloat16* ahi_p[MT];
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m_lo = m0 + 16 * mt + g, m_hi = m_lo + 8;
      alo_p[mt] = m_lo < end ? a + static_cast<int64_t>(a_row(m_lo)) * k_dim + 8 * c : nullptr;
      ahi_p[mt] = m_hi < end ? a + static_cast<int64_t>(a_row(m_hi)) * k_dim + 8 * c : nullptr;
      acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
    }
    auto chunk = [&](int k, const uint4& b) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        if (MT == 1 || mt < tiles)
          mma_chunk(acc[mt], load_or_zero(alo_p[mt] ? alo_p[mt] + k : nullptr),
                    load_or_zero(ahi_p[mt] ? ahi_p[mt] + k : nullptr), b);
    };
    int k0 = k_begin;
    for (; k0 + 32 * kUnroll <= k_end; k0 += 32 * kUnroll) {
      uint4 b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) b[u] = load_stream(wr + k0 + 32 * u, policy);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) chunk(k0 + 32 * u, b[u]);
    }
    for (; k0 < k_end; k0 += 32) chunk(k0, load_stream(wr + k0, policy));
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // C fragment: rows (pairs) g and g + 8, columns (weight rows) n0 + 2c, n0 + 2c + 1.
      const int m_lo = m0 + 16 * mt + g, m_hi = m_lo + 8;
      if (m_lo < end) {
        const int64_t r = kPairRowsOut ? sorted[m_lo] : m_lo;
        *reinterpret_cast<float2*>(out_z + r * n_dim + n0 + 2 * c) = make_float2(acc[mt][0], acc[mt][1]);
      }
      if (m_hi < end) {
        const int64_t r = kPairRowsOut ? sorted[m_hi] : m_hi;
        *reinterpret_cast<float2*>(out_z + r * n_dim + n0 + 2 * c) = make_float2(acc[mt][2], acc[mt][3]);
      }
    }
  }
}

// act[m, n] = silu(Σ_z gate[z, m, n]) · Σ_z up[z, m, n] (bf16, the down projection's input).
__global__ void gate_up_finish_kernel(const float* __restrict__ gate, const float* __restrict__ up, int splits,
                                      int64_t n, __nv_bfloat16* __restrict__ act) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float gv = 0.0f, uv = 0.0f;
  for (int z = 0; z < splits; ++z) {
    gv += gate[z * n + i];
    uv += up[z * n + i];
  }
  act[i] = __float2bfloat16_rn(gv / (1.0f + __expf(-gv)) * uv);
}

// out[t, n] = Σ_k w[t, k] · y[row(t, k), n] (+ add[t, n] last, when given), slots in order; pairs
// with an invalid id add nothing. One block row per token: its slots' weights and y rows are read
// once into shared memory (not by every thread, each a load the y load then waited for), then each
// thread adds kVec adjacent columns with every slot's y loaded before any is used (kChunk slots at
// once). 16-byte loads where the rows allow them: with one float a thread the 8192-token prefill's
// combine read y at ~1 TB/s (2.0 ms a layer on an H100).
constexpr int kMaxCombineSlots = 64;  // top_k <= 32 (moe_route) and the extra slot
template <int kVec>
__global__ void combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ pair_row, MoeSlots slots,
                               int experts, int hidden, const float* __restrict__ add, float* __restrict__ out) {
  using Vec = std::conditional_t<kVec == 4, float4, float>;
  constexpr int kChunk = 8;
  __shared__ float s_weight[kMaxCombineSlots];
  __shared__ int64_t s_row[kMaxCombineSlots];  // -1: the pair adds nothing
  pdl_wait();                                  // first: launched with launch_dependent
  const int t = blockIdx.x;                    // tokens on x: a prefill step may hold more than gridDim.y's 65535
  const int K = slots.per_token();
  for (int j = threadIdx.x; j < K; j += blockDim.x) {
    const int pair = t * K + j;
    const bool used = slots.computed(slots.id(pair), experts);
    s_weight[j] = used ? slots.weight(pair) : 0.0f;
    s_row[j] = used ? static_cast<int64_t>(pair_row ? pair_row[pair] : pair) * hidden : -1;
  }
  __syncthreads();
  const int n = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (n >= hidden) return;
  float acc[kVec] = {};
  for (int k0 = 0; k0 < K; k0 += kChunk) {
    Vec v[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int64_t row = k0 + j < K ? s_row[k0 + j] : -1;
      v[j] = row >= 0 ? *reinterpret_cast<const Vec*>(y + row + n) : Vec{};
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (k0 + j >= K || s_row[k0 + j] < 0) continue;
      const float w = s_weight[k0 + j];
      const float* vj = reinterpret_cast<const float*>(&v[j]);
#pragma unroll
      for (int c = 0; c < kVec; ++c) acc[c] += w * vj[c];
    }
  }
  const int64_t o = static_cast<int64_t>(t) * hidden + n;
  if (add) {
    const Vec a = *reinterpret_cast<const Vec*>(add + o);
    const float* ac = reinterpret_cast<const float*>(&a);
#pragma unroll
    for (int c = 0; c < kVec; ++c) acc[c] += ac[c];
  }
  *reinterpret_cast<Vec*>(out + o) = *reinterpret_cast<const Vec*>(acc);
}

}  // namespace

int64_t moe_grouped_gate_up_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter) {
  // Few (expert, row) warps, four hidden slices multiply them: a step of few pairs, or one whose
  // light experts go to the matrix-vector kernels, leaving the tensor cores a handful of heavy ones
  // (the shared expert alone at batch 16: 32 blocks without the split, 0.3 TB/s).
  if (hidden % (4 * 32) != 0) return 1;
  return pairs <= 64 || (moe_gemv_supported(hidden, inter) && tokens > kMoeGemvMaxPairs) ? 4 : 1;
}

int64_t moe_grouped_part_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter, int64_t experts) {
  if (!moe_grouped_weights_a()) return moe_grouped_gate_up_splits(tokens, pairs, hidden, inter);
  return moe_wa_gate_up_splits(tokens, pairs, hidden, inter, std::min(experts, pairs));
}

bool moe_grouped_supported(int64_t hidden, int64_t inter, int64_t experts) {
  return experts <= kMaxExperts && hidden % 32 == 0 && inter % 32 == 0;
}

namespace {

// The instance of expert_project_kernel for `tiles` tiles of 16 pairs (moe_grouped_tiles).
template <bool kTokenRows, bool kPairRowsOut>
auto project_kernel(int tiles) {
  return tiles == 4   ? expert_project_kernel<kTokenRows, kPairRowsOut, 4>
         : tiles == 2 ? expert_project_kernel<kTokenRows, kPairRowsOut, 2>
                      : expert_project_kernel<kTokenRows, kPairRowsOut, 1>;
}

// Gate and up (split over the hidden dimension for few pairs), then the finish kernel, on tensor
// cores, for the experts with at least min_pairs pairs.
void launch_mma_gate_up(const __nv_bfloat16* x, int64_t tokens, int64_t hidden, int64_t top_k, int tiles,
                        const MoeGroupedScratch& s, unsigned expert_slots, int min_pairs,
                        const __nv_bfloat16* const* gate_w, const __nv_bfloat16* const* up_w, int64_t inter,
                        cudaStream_t stream) {
  const int pairs = static_cast<int>(tokens * top_k);
  const bool weights_a = moe_grouped_weights_a();
  const int64_t splits = moe_grouped_part_splits(tokens, pairs, hidden, inter, expert_slots);
  const int64_t slice = static_cast<int64_t>(pairs) * inter;
  if (weights_a) {
    launch_moe_wa_gate_up(x, hidden, top_k, s, expert_slots, min_pairs, splits, gate_w, up_w, inter, pairs, stream);
    if (splits == 1) return;  // act written: no partial sums
  } else {
    dim3 gu_grid(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots,
                 static_cast<unsigned>(splits));
    const auto kernel = project_kernel<true, false>(tiles);
    for (int matrix = 0; matrix < 2; ++matrix)
      launch_plain(kernel, gu_grid, kWarpsPerBlock * 32, 0, stream, x, static_cast<int>(hidden),
                   static_cast<int>(top_k), s.sorted, s.offsets, s.active, s.num_active, matrix == 0 ? gate_w : up_w,
                   static_cast<int>(inter), s.gate_up_part + matrix * splits * slice, slice, min_pairs);
  }
  launch_plain(gate_up_finish_kernel, static_cast<unsigned>((slice + 255) / 256), 256, 0, stream, s.gate_up_part,
               s.gate_up_part + splits * slice, static_cast<int>(splits), slice, s.act);
}

void launch_mma_down(int64_t hidden, int64_t top_k, int64_t pairs, int tiles, const MoeGroupedScratch& s,
                     unsigned expert_slots, int min_pairs, const __nv_bfloat16* const* down_w, int64_t inter,
                     cudaStream_t stream) {
  if (moe_grouped_weights_a()) {
    launch_moe_wa_down(hidden, top_k, s, expert_slots, min_pairs, down_w, inter, pairs, stream);
    return;
  }
  dim3 d_grid(static_cast<unsigned>((hidden + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots);
  const auto kernel = project_kernel<false, true>(tiles);
  launch_plain(kernel, d_grid, kWarpsPerBlock * 32, 0, stream, s.act, static_cast<int>(inter), static_cast<int>(top_k),
               s.sorted, s.offsets, s.active, s.num_active, down_w, static_cast<int>(hidden), s.y, 0, min_pairs);
}

}  // namespace

void launch_moe_prepare(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                        const MoeGroupedScratch& s, cudaStream_t stream) {
  const int pairs = static_cast<int>(tokens * slots.per_token());
  const int64_t x_elems = s.xb ? tokens * hidden : 0;
  launch_dependent(prepare_kernel, dim3(static_cast<unsigned>(1 + (x_elems + kConvertPerBlock - 1) / kConvertPerBlock)),
                   1024, 0, stream, slots, pairs, static_cast<int>(experts), s.offsets, s.active, s.num_active,
                   s.sorted, s.pair_row, x, x_elems, s.xb);
}

void launch_moe_grouped_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                                const __nv_bfloat16* const* gate_w, const __nv_bfloat16* const* up_w,
                                const __nv_bfloat16* const* down_w, int64_t inter, const MoeGroupedScratch& s,
                                cudaStream_t stream) {
  const int64_t top_k = slots.per_token();
  const int pairs = static_cast<int>(tokens * top_k);
  if (pairs == 0) return;
  launch_moe_prepare(x, tokens, hidden, slots, experts, s, stream);
  const __nv_bfloat16* xb = s.xb;
  // At most min(experts, pairs) experts have work; blocks past *num_active return at once.
  const unsigned expert_slots = static_cast<unsigned>(std::min<int64_t>(experts, pairs));
  // Experts with at most kMoeGemvMaxPairs pairs go to the matrix-vector kernels (moe/gemv.cu), the
  // others to the tensor-core kernels; a step of at most that many tokens has no other kind. The
  // order matters: the finish kernel writes act for every pair, the matrix-vector gate/up then
  // rewrites its experts' rows.
  const bool gemv = moe_gemv_supported(hidden, inter);
  const bool mma = !gemv || tokens > kMoeGemvMaxPairs;
  // (Without the tensor-core kernels the matrix-vector ones take every expert, however many pairs.)
  const int gemv_max = !gemv ? 0 : mma ? kMoeGemvMaxPairs : std::numeric_limits<int>::max();
  const int mma_min = gemv ? kMoeGemvMaxPairs + 1 : 0;
  const int tiles = moe_grouped_tiles(pairs, experts);  // gate, up and down alike
  if (mma) launch_mma_gate_up(xb, tokens, hidden, top_k, tiles, s, expert_slots, mma_min, gate_w, up_w, inter, stream);
  if (gemv) launch_moe_gemv_gate_up(xb, hidden, top_k, s, expert_slots, gemv_max, gate_w, up_w, inter, stream);
  if (mma) launch_mma_down(hidden, top_k, pairs, tiles, s, expert_slots, mma_min, down_w, inter, stream);
  if (gemv) launch_moe_gemv_down(hidden, top_k, s, expert_slots, gemv_max, down_w, inter, stream);
}

void launch_moe_combine(const float* y, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                        const float* add, float* out, cudaStream_t stream, const int32_t* pair_row) {
  if (tokens == 0) return;
  TESSERA_CHECK(slots.per_token() <= kMaxCombineSlots, "moe combine: {} slots a token; at most {}", slots.per_token(),
                kMaxCombineSlots);
  const bool vec = float4_access(hidden, {y, out, add});  // add may be null
  const int per_thread = vec ? 4 : 1;
  const int64_t threads = 256;
  dim3 c_grid(static_cast<unsigned>(tokens),
              static_cast<unsigned>((hidden + threads * per_thread - 1) / (threads * per_thread)));
  const auto kernel = vec ? combine_kernel<4> : combine_kernel<1>;
  launch_dependent(kernel, c_grid, threads, 0, stream, y, pair_row, slots, static_cast<int>(experts),
                   static_cast<int>(hidden), add, out);
}

}  // namespace tessera::ops::cuda
