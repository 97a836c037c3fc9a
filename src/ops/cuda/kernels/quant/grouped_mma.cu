// Routed experts in NVFP4 on tensor cores (W4A16): the pairs grouped.cu's prepare kernel sorted by
// expert, 16 at a time as the M of mma.sync m16n8k16 (bf16 in, fp32 accumulate), 8 weight rows a
// warp as its N. The e2m1 codes become bf16 in registers the way Marlin does it: a code's three
// magnitude bits shifted under a bf16 exponent give the value times 2^-126, one bf16 multiply by
// 2^126 makes it exact, a second by the group's e4m3 scale (exact: at most 6 significant bits); the
// tensor's global scale multiplies the fp32 sums. About 2 instructions a weight where the CUDA-core
// kernel (gemv.cu) needs 6, and 16 tokens for the price of one.
//
// (The bias multiply is folded into the group scale: decode_nvfp4.)
//
// K is walked in blocks of 128: lane (g, c) loads 16 bytes of weight row n0 + g, values
// [128 kb + 32 c, + 32), and their two e4m3 scales. Each 32-bit word (8 values, first in the low
// nibble) is decoded into the pairs (3, 7), (2, 6), (1, 5), (0, 4), which become the B fragments of
// two MMAs; the A fragments take the activations of the same K positions (a dot product allows any
// permutation of K, as long as both operands follow it).
//   gate/up: act[m, n] = silu(x[tok(m)] · Wg[e][n]) · (x[tok(m)] · Wu[e][n]), both matrices in one
//            warp (two accumulators), act bf16 for the down projection
//   down:    y[pair(m), n] = act[m] · Wd[e][n]
#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/quant_matrix.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 8;  // MMA N
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kBlockK = 128;  // values of a row the warp's 4 lanes of a row cover per load
constexpr int kAhead = 4;     // K blocks of loads in flight (8: 168 registers, one block an SM, slower)

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }

// The codes' bits under a bf16 exponent are the values times 2^-126; the exponent bias is folded
// into the group scale: scale · 2^117 (at most 448 · 2^117 < 2^126, the largest bf16 exponent; exact,
// an e4m3 scale has 4 significant bits), so one multiply gives value · scale · 2^-9 (exact: at most
// 6 significant bits, and at least 2^-19, a normal number) and the fp32 sums are scaled back by 2^9
// with the global scale.
constexpr float kScaleBias = 0x1p117f;
constexpr float kSumUnbias = 0x1p9f;

// The bf16x2 of a group's e4m3 scale byte times kScaleBias.
__device__ __forceinline__ __nv_bfloat162 biased_scale(uint32_t e4m3) {
  const float v = quant::e4m3_to_f32(e4m3) * kScaleBias;
  return __floats2bfloat162_rn(v, v);
}

// The 8 codes of `q` as bf16 pairs (3, 7), (2, 6), (1, 5), (0, 4), times `scale` (biased_scale of the
// group's scale) and 2^-126.
__device__ __forceinline__ void decode_nvfp4(uint32_t q, __nv_bfloat162 scale, uint32_t (&b)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = (q & 0x80008000u) | ((q & 0x70007000u) >> 6);
    b[i] = bf16x2_bits(__hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits), scale));
    q <<= 4;
  }
}

// Activations of 8 consecutive K positions (bf16, 16 bytes) as the pairs (3, 7), (2, 6), (1, 5),
// (0, 4) that decode_nvfp4 produces for the weights.
__device__ __forceinline__ void permute_act(const uint4& r, uint32_t (&a)[4]) {
  a[0] = __byte_perm(r.y, r.w, 0x7632);
  a[1] = __byte_perm(r.y, r.w, 0x5410);
  a[2] = __byte_perm(r.x, r.z, 0x7632);
  a[3] = __byte_perm(r.x, r.z, 0x5410);
}

__device__ __forceinline__ uint4 load_or_zero(const __nv_bfloat16* p) {
  return p ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

// acc[s] += A · W_s over all K for the 16 pairs of the tile (lo/hi: this lane's two pairs' rows,
// null past the expert's end), S weight streams of the same row index. (A cp.async ring in shared
// memory kStages = 4 blocks deep instead of the kAhead registers measured slower at batch 16 and 128
// and the same at batch 1: the kernel is bound by its instructions, not by exposed load latency;
// docs/PERFORMANCE.md.)
template <int S>
__device__ __forceinline__ void tile_dot(const quant::RowRef (&ref)[S], int k_dim, const __nv_bfloat16* lo,
                                         const __nv_bfloat16* hi, uint64_t policy, float (&acc)[S][4]) {
  const int c = threadIdx.x & 3;
  const int blocks = k_dim / kBlockK;
  for (int kb0 = 0; kb0 < blocks; kb0 += kAhead) {
    uint4 raw[S][kAhead];
    uint32_t sc[S][kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int k = (kb0 + u) * kBlockK + 32 * c;
      const bool in = kb0 + u < blocks;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        raw[s][u] = in ? load_stream(reinterpret_cast<const __nv_bfloat16*>(ref[s].data + k / 2), policy)
                       : make_uint4(0, 0, 0, 0);
        sc[s][u] = in ? quant::load_scales<QuantFormat::kNvfp4>(ref[s], k, 0) : 0u;
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (kb0 + u >= blocks) break;
      const int k = (kb0 + u) * kBlockK + 32 * c;
      // The lane's two groups of 16 values: words 0-1 and 2-3.
      __nv_bfloat162 scale[S][2];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        scale[s][0] = biased_scale(sc[s][u] & 0xffu);
        scale[s][1] = biased_scale((sc[s][u] >> 8) & 0xffu);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // 8 values each: [k + 8w, + 8)
        uint32_t alo[4], ahi[4];
        permute_act(load_or_zero(lo ? lo + k + 8 * w : nullptr), alo);
        permute_act(load_or_zero(hi ? hi + k + 8 * w : nullptr), ahi);
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const uint32_t q = w == 0 ? raw[s][u].x : w == 1 ? raw[s][u].y : w == 2 ? raw[s][u].z : raw[s][u].w;
          uint32_t b[4];
          decode_nvfp4(q, scale[s][w / 2], b);
          mma_bf16(acc[s], alo[0], ahi[0], alo[1], ahi[1], b[0], b[1]);
          mma_bf16(acc[s], alo[2], ahi[2], alo[3], ahi[3], b[2], b[3]);
        }
      }
    }
  }
}

// One block per (kRowsPerBlock weight rows, active expert), over all of the expert's pairs in tiles
// of 16.
template <bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32)
    nvfp4_expert_mma_kernel(const __nv_bfloat16* __restrict__ a, int top_k, const int32_t* __restrict__ sorted,
                            const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                            const int32_t* __restrict__ num_active, const QuantMatrix* __restrict__ w0,
                            const QuantMatrix* __restrict__ w1, __nv_bfloat16* __restrict__ act_out,
                            float* __restrict__ y_out) {
  pdl_wait();  // first: launched with launch_dependent
  if (static_cast<int>(blockIdx.y) >= *num_active) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int e = active[blockIdx.y];
  const QuantMatrix& m0 = w0[e];
  const int n_dim = m0.n, k_dim = m0.k;
  const int n0 = static_cast<int>(blockIdx.x) * kRowsPerBlock + warp * kRowsPerWarp;
  if (n0 >= n_dim) return;  // n_dim % 8 == 0
  const int begin = offsets[e], end = offsets[e + 1];
  constexpr int S = kGateUp ? 2 : 1;
  quant::RowRef ref[S];
  ref[0] = quant::row_ref<QuantFormat::kNvfp4>(m0, n0 + g);
  if constexpr (kGateUp) ref[1] = quant::row_ref<QuantFormat::kNvfp4>(w1[e], n0 + g);
  const uint64_t policy = l2_evict_first_policy();
  auto a_row = [&](int m) { return kGateUp ? sorted[m] / top_k : m; };
  for (int m0i = begin; m0i < end; m0i += 16) {
    const int m_lo = m0i + g, m_hi = m0i + g + 8;
    const __nv_bfloat16* lo = m_lo < end ? a + static_cast<int64_t>(a_row(m_lo)) * k_dim : nullptr;
    const __nv_bfloat16* hi = m_hi < end ? a + static_cast<int64_t>(a_row(m_hi)) * k_dim : nullptr;
    float acc[S][4];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][i] = 0.0f;
    tile_dot<S>(ref, k_dim, lo, hi, policy, acc);
    // C fragment: pairs m_lo (acc 0, 1) and m_hi (acc 2, 3), weight rows n0 + 2c, n0 + 2c + 1. The
    // group scales' kUnscale is 1 here: the codes were made exact before the MMA, times 2^-9.
    const float g0 = m0.global_scale * kSumUnbias;
    if constexpr (kGateUp) {
      const float g1 = w1[e].global_scale * kSumUnbias;
      auto act = [&](float gate, float up) {
        gate *= g0;
        up *= g1;
        return gate / (1.0f + __expf(-gate)) * up;
      };
      if (m_lo < end)
        *reinterpret_cast<__nv_bfloat162*>(act_out + static_cast<int64_t>(m_lo) * n_dim + n0 + 2 * c) =
            __floats2bfloat162_rn(act(acc[0][0], acc[1][0]), act(acc[0][1], acc[1][1]));
      if (m_hi < end)
        *reinterpret_cast<__nv_bfloat162*>(act_out + static_cast<int64_t>(m_hi) * n_dim + n0 + 2 * c) =
            __floats2bfloat162_rn(act(acc[0][2], acc[1][2]), act(acc[0][3], acc[1][3]));
    } else {
      if (m_lo < end)
        *reinterpret_cast<float2*>(y_out + static_cast<int64_t>(sorted[m_lo]) * n_dim + n0 + 2 * c) =
            make_float2(acc[0][0] * g0, acc[0][1] * g0);
      if (m_hi < end)
        *reinterpret_cast<float2*>(y_out + static_cast<int64_t>(sorted[m_hi]) * n_dim + n0 + 2 * c) =
            make_float2(acc[0][2] * g0, acc[0][3] * g0);
    }
  }
}

}  // namespace

bool moe_nvfp4_mma_supported(const QuantMatrix& gate, const QuantMatrix& down) {
  return gate.format == QuantFormat::kNvfp4 && down.format == QuantFormat::kNvfp4 && gate.k % kBlockK == 0 &&
         down.k % kBlockK == 0 && gate.n % kRowsPerWarp == 0 && down.n % kRowsPerWarp == 0;
}

void launch_moe_nvfp4_mma_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots,
                                  int64_t experts, const QuantMatrix* gate_w, const QuantMatrix* up_w,
                                  const QuantMatrix* down_w, int64_t inter, const MoeGroupedScratch& s,
                                  cudaStream_t stream) {
  const int64_t pairs = tokens * slots.per_token();
  if (pairs == 0) return;
  launch_moe_prepare(x, tokens, hidden, slots, experts, s, stream);
  const unsigned expert_slots = static_cast<unsigned>(std::min<int64_t>(experts, pairs));
  const int top_k = slots.per_token();
  launch_dependent(nvfp4_expert_mma_kernel<true>,
                   dim3(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots), kWarps * 32,
                   0, stream, static_cast<const __nv_bfloat16*>(s.xb), top_k, s.sorted, s.offsets, s.active,
                   s.num_active, gate_w, up_w, s.act, static_cast<float*>(nullptr));
  launch_dependent(nvfp4_expert_mma_kernel<false>,
                   dim3(static_cast<unsigned>((hidden + kRowsPerBlock - 1) / kRowsPerBlock), expert_slots), kWarps * 32,
                   0, stream, static_cast<const __nv_bfloat16*>(s.act), top_k, s.sorted, s.offsets, s.active,
                   s.num_active, down_w, static_cast<const QuantMatrix*>(nullptr), static_cast<__nv_bfloat16*>(nullptr),
                   s.y);
}

}  // namespace tessera::ops::cuda
