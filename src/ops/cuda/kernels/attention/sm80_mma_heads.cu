// MLA decode/prefill attention on tensor cores (mma.sync m16n8k16 bf16 -> fp32: SM80, SM90, SM100,
// SM120). The block's 16 heads are the M dimension: S = Q·Kᵀ over [latent | rope] and O += P·V with
// V = the latent part of the same cache rows, so each 32-row tile of the cache is read once for all
// 16 heads. Online softmax in fp32; q (pre-scaled) and p are rounded to bf16 for the MMAs, as
// FlashMLA does. Partials per context split are merged by the same combine kernel as the CUDA-core
// path (attention.cu).
#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kRows = 16;  // heads per block (MMA M)
constexpr int kTile = 32;  // cache positions per tile (4 warps x 8 = MMA N of Q·Kᵀ)
constexpr int kWarps = 4;
constexpr int kPad = 8;  // bf16 elements of padding per shared row (keeps 16-byte alignment)

using mma::mma_bf16;

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ inline uint32_t load_pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// NB = latent / 32: the 8-column output blocks each warp owns (latent split over the 4 warps).
template <int NB>
__global__ void __launch_bounds__(kWarps * 32)
    attend_mma_kernel(const float* q_full, int heads, int latent, int rope, const TokenInfo* info,
                      const int32_t* tables, const __nv_bfloat16* cache, int page, float scale, float* o_part,
                      float* ml_part) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int entry = latent + rope, stride = entry + kPad;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);      // [kRows][stride]
  __nv_bfloat16* ks = qs + kRows * stride;                             // [kTile][stride]
  __nv_bfloat16* ps = ks + kTile * stride;                             // [kRows][kTile + kPad]
  float* red = reinterpret_cast<float*>(ps + kRows * (kTile + kPad));  // [kWarps][kRows]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int split = blockIdx.x, t = blockIdx.y, h0 = blockIdx.z * kRows;
  const int tokens = gridDim.y;
  const TokenInfo ti = info[t];
  const MlaSplitRange range = mla_split_range(ti.pos, split, gridDim.x, kTile);
  const int begin = range.begin, end = range.end;

  // Q rows (pre-scaled), zero for padding heads.
  for (int idx = threadIdx.x; idx < kRows * entry; idx += blockDim.x) {
    const int r = idx / entry, i = idx % entry, h = h0 + r;
    const float v = h < heads ? q_full[(static_cast<int64_t>(t) * heads + h) * entry + i] * scale : 0.0f;
    qs[r * stride + i] = __float2bfloat16_rn(v);
  }

  float o[NB][4];
#pragma unroll
  for (int j = 0; j < NB; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_row[2] = {-FLT_MAX, -FLT_MAX}, l_row[2] = {0.0f, 0.0f};  // rows g and g + 8
  const int vec_per_row = entry / 8;

  for (int base = begin; base < end; base += kTile) {
    __syncthreads();
    const int n = min(kTile, end - base);
    for (int p = warp; p < kTile; p += kWarps) {
      uint4* dst = reinterpret_cast<uint4*>(ks + p * stride);
      if (p < n) {
        const int pos = base + p;
        const int64_t row = static_cast<int64_t>(tables[ti.table_offset + pos / page]) * page + pos % page;
        const uint4* src = reinterpret_cast<const uint4*>(cache + row * entry);
        for (int v = lane; v < vec_per_row; v += 32) dst[v] = src[v];
      } else {
        for (int v = lane; v < vec_per_row; v += 32) dst[v] = make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();

    // S[16 x 8] for this warp's 8 positions.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const __nv_bfloat16* krow = ks + (warp * 8 + g) * stride;
    for (int k0 = 0; k0 < entry; k0 += 16) {
      uint32_t a[4], b[2];
      a[0] = load_pair(qs + g * stride + k0 + 2 * c);
      a[1] = load_pair(qs + (g + 8) * stride + k0 + 2 * c);
      a[2] = load_pair(qs + g * stride + k0 + 8 + 2 * c);
      a[3] = load_pair(qs + (g + 8) * stride + k0 + 8 + 2 * c);
      b[0] = load_pair(krow + k0 + 2 * c);
      b[1] = load_pair(krow + k0 + 8 + 2 * c);
      mma_bf16(s, a, b[0], b[1]);
    }
    // Mask positions past the tile's end.
    const int col0 = warp * 8 + 2 * c;
    if (col0 >= n) s[0] = s[2] = -FLT_MAX;
    if (col0 + 1 >= n) s[1] = s[3] = -FLT_MAX;
    // Row maxima: over the quad (this warp's 8 columns), then over the 4 warps.
    float mx[2] = {fmaxf(s[0], s[1]), fmaxf(s[2], s[3])};
    for (int off = 1; off < 4; off <<= 1)
      for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], off));
    if (c == 0) {
      red[warp * kRows + g] = mx[0];
      red[warp * kRows + g + 8] = mx[1];
    }
    __syncthreads();
    float m_new[2], alpha[2];
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      float m_tile = red[row];
      for (int w = 1; w < kWarps; ++w) m_tile = fmaxf(m_tile, red[w * kRows + row]);
      m_new[r] = fmaxf(m_row[r], m_tile);
      alpha[r] = __expf(m_row[r] - m_new[r]);
    }
    const float p0 = __expf(s[0] - m_new[0]), p1 = __expf(s[1] - m_new[0]);
    const float p2 = __expf(s[2] - m_new[1]), p3 = __expf(s[3] - m_new[1]);
    // P to shared memory (bf16) for the P·V MMAs, which need all 32 columns.
    *reinterpret_cast<uint32_t*>(ps + g * (kTile + kPad) + col0) = pack_bf16(p0, p1);
    *reinterpret_cast<uint32_t*>(ps + (g + 8) * (kTile + kPad) + col0) = pack_bf16(p2, p3);
    float sum[2] = {p0 + p1, p2 + p3};
    for (int off = 1; off < 4; off <<= 1)
      for (int r = 0; r < 2; ++r) sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], off);
    __syncthreads();  // everyone has read `red` (maxima) and written P
    if (c == 0) {
      red[warp * kRows + g] = sum[0];
      red[warp * kRows + g + 8] = sum[1];
    }
    __syncthreads();
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += red[w * kRows + row];
      l_row[r] = l_row[r] * alpha[r] + total;
      m_row[r] = m_new[r];
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    // O[16 x latent] += P[16 x 32] · V[32 x latent]; this warp owns columns [warp*8*NB, (warp+1)*8*NB).
#pragma unroll
    for (int k0 = 0; k0 < kTile; k0 += 16) {
      uint32_t a[4];
      const __nv_bfloat16* prow = ps + g * (kTile + kPad) + k0 + 2 * c;
      a[0] = load_pair(prow);
      a[1] = load_pair(prow + 8 * (kTile + kPad));
      a[2] = load_pair(prow + 8);
      a[3] = load_pair(prow + 8 * (kTile + kPad) + 8);
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int col = (warp * NB + j) * 8 + g;
        const __nv_bfloat16* v0 = ks + (k0 + 2 * c) * stride + col;
        uint32_t b[2];
        __nv_bfloat162 lo, hi;
        lo.x = v0[0];
        lo.y = v0[stride];
        hi.x = v0[8 * stride];
        hi.y = v0[9 * stride];
        b[0] = *reinterpret_cast<uint32_t*>(&lo);
        b[1] = *reinterpret_cast<uint32_t*>(&hi);
        mma_bf16(o[j], a, b[0], b[1]);
      }
    }
  }

  // Partials: o (unnormalised), m and l for rows g and g + 8 of this block's heads.
  for (int r = 0; r < 2; ++r) {
    const int h = h0 + g + 8 * r;
    if (h >= heads) continue;
    const int64_t slot = (static_cast<int64_t>(split) * tokens + t) * heads + h;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int col = (warp * NB + j) * 8 + 2 * c;
      o_part[slot * latent + col] = o[j][2 * r];
      o_part[slot * latent + col + 1] = o[j][2 * r + 1];
    }
    if (warp == 0 && c == 0) {
      ml_part[2 * slot] = m_row[r];
      ml_part[2 * slot + 1] = l_row[r];
    }
  }
}

template <int NB>
void launch(dim3 grid, size_t smem, cudaStream_t s, const float* q_full, int heads, int latent, int rope,
            const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache, int page, float scale,
            float* o_part, float* ml_part) {
  allow_dynamic_smem(attend_mma_kernel<NB>, 98 * 1024);
  launch_plain(attend_mma_kernel<NB>, grid, kWarps * 32, smem, s, q_full, heads, latent, rope, info, tables, cache,
               page, scale, o_part, ml_part);
}

}  // namespace

bool mla_attend_mma_supported(int64_t latent, int64_t rope) {
  const int64_t entry = latent + rope;
  return entry % 16 == 0 && (latent == 32 || latent == 64 || latent == 128 || latent == 256 || latent == 512);
}

void launch_mla_attend_mma_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                                    const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache,
                                    int64_t page, int64_t splits, float scale, float* o_part, float* ml_part,
                                    cudaStream_t s) {
  const int64_t entry = latent + rope, stride = entry + kPad;
  const size_t smem = (kRows * stride + kTile * stride + kRows * (kTile + kPad)) * 2 + kWarps * kRows * 4;
  dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(tokens),
            static_cast<unsigned>((heads + kRows - 1) / kRows));
  const int h = static_cast<int>(heads), l = static_cast<int>(latent), r = static_cast<int>(rope),
            pg = static_cast<int>(page);
  // One instance per supported latent width (mla_attend_mma_supported): NB = latent / 32.
  const auto run = latent == 32    ? launch<1>
                   : latent == 64  ? launch<2>
                   : latent == 128 ? launch<4>
                   : latent == 256 ? launch<8>
                                   : launch<16>;
  run(grid, smem, s, q_full, h, l, r, info, tables, cache, pg, scale, o_part, ml_part);
}

}  // namespace tessera::ops::cuda
