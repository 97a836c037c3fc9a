// MLA prefill kernels (spec §4.3): the latent gather from the paged cache, and causal flash
// attention over decompressed K = [K_nope | k_pe] and V on tensor cores (mma.sync m16n8k16 bf16 ->
// fp32, ldmatrix, cp.async: SM80, SM90, SM100, SM120).
//
// Attention block: 16 query rows a warp, 64 rows (4 warps) or, in bf16 precision with
// TESSERA_MLA_PREFILL_QUERY_ROWS=128, 128 rows (8 warps), of one sequence and one head; key tiles of
// 64 rows (32 in split precision). A block reads its keys' K and V once for all of its rows, so 128
// rows halve the K/V bytes a FLOP (640 bytes a key and head at 192/128), which bound the 64-row
// kernel at ~160 TFLOP/s on an H100 (docs/PERFORMANCE.md); 128 x 200 x 2 + 64 x 200 x 2 + 64 x 136
// x 2 = 94 KB of shared memory still fits SM120; its registers are held to 128 (two blocks, 16 warps
// an SM, at 64 bytes of spills, where ptxas alone takes 164 and one block). Q, K and V are bf16 in
// shared memory (rows padded by 16 bytes so that ldmatrix is free of bank conflicts); split
// precision keeps a hi and a lo copy of each. For 192/128 and 64 rows: bf16 64 x 200 x 2 x 2 + 64 x
// 136 x 2 = 67 KB; split (64 + 32) x 200 x 2 x 2 + 32 x 136 x 2 x 2 = 92 KB; all under the 99 KB a
// block may use on SM120. K(j+1) streams in (cp.async) during softmax and P·V of tile j, V(j) during
// Q·Kᵀ(j). Each warp owns its 16 rows outright, so the online softmax (fp32, exp2 domain) needs only
// quad shuffles. Operand precision: see
// PrefillAttendArgs (bf16 rounds q, K, V and P as bf16 transformers does; split is ~2^-16).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels/attention/kv_fp8.cuh"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kRowsWarp = 16;  // query rows a warp (one m16 MMA tile)
// Threads of a block of `rows` query rows.
__host__ __device__ constexpr int threads_for(int rows) { return 32 * rows / kRowsWarp; }
constexpr int kPad = 8;  // bf16 per shared row

using namespace mma;

// (x0, x1) -> hi = bf16 pair, lo = bf16 pair of the remainders.
__device__ inline void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 f = __bfloat1622float2(h);
  __nv_bfloat162 l = __floats2bfloat162_rn(x0 - f.x, x1 - f.y);
  hi = *reinterpret_cast<uint32_t*>(&h);
  lo = *reinterpret_cast<uint32_t*>(&l);
}

// Keys a tile: split precision halves it to fit its hi and lo copies.
template <bool SPLIT>
constexpr int kRowsKOf = SPLIT ? 32 : 64;

// QK, DV: the padded head dims of this instance (multiples of 16); the real nope + rope and v are
// <= them and the padding columns are zero in shared memory. SPLIT: see PrefillAttendArgs. ROWS:
// query rows a block (64 or 128).
template <int QK, int DV, bool SPLIT, int ROWS>
__global__ void __launch_bounds__(threads_for(ROWS), ROWS == 128 ? 2 : 1) prefill_attend_kernel(PrefillAttendArgs a) {
  constexpr int kRowsQ = ROWS, kThreads = threads_for(ROWS);
  constexpr int kRowsK = kRowsKOf<SPLIT>;
  constexpr int kQs = QK + kPad, kVs = DV + kPad;  // shared row strides (bf16)
  constexpr int kNt = kRowsK / 8;                  // 8-key column blocks of S
  constexpr int kNo = DV / 8;                      // 8-wide column blocks of O
  constexpr int kParts = SPLIT ? 2 : 1;            // hi (and lo) copies
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kRowsQ][kQs] (then the lo copy)
  __nv_bfloat16* ks = qs + kParts * kRowsQ * kQs;                  // [kRowsK][kQs] (then the lo copy)
  __nv_bfloat16* vs = ks + kParts * kRowsK * kQs;                  // [kRowsK][kVs] (then the lo copy)
  __nv_bfloat16* qs_lo = qs + kRowsQ * kQs;
  __nv_bfloat16* ks_lo = ks + kRowsK * kQs;
  __nv_bfloat16* vs_lo = vs + kRowsK * kVs;

  const PrefillTile tile = a.tiles[blockIdx.x];
  const PrefillChunk ch = a.chunks[tile.chunk];
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int qk = a.nope + a.rope, kv_width = a.heads * (a.nope + a.v), entry = a.latent + a.rope;
  const int n_rows = min(kRowsQ, ch.n_q - tile.q0);  // valid query rows of this block
  const int qpos0 = ch.start_pos + tile.q0;          // absolute position of row 0
  // Keys this block sees: the slice's positions up to its last query row's (causal).
  const int nkeys = max(0, min(ch.c1, qpos0 + n_rows) - ch.c0);
  const bool first = ch.flags & kChunkFirst, last = ch.flags & kChunkLast;
  if (nkeys == 0 && !last) return;  // the state of these rows passes through unchanged

  // K tile: row r = key c0 + kb + r; columns [K_nope(h) | k_pe | zero padding]. k_pe is a bf16
  // latent, exact in hi: its lo is zero.
  auto load_k = [&](int kb) {
    for (int idx = threadIdx.x; idx < kRowsK * (QK / 8); idx += kThreads) {
      const int r = idx / (QK / 8), col = (idx % (QK / 8)) * 8;
      const int64_t row = ch.buf_row + kb + r;
      const bool in = kb + r < nkeys;
      const int64_t at = row * kv_width + h * (a.nope + a.v) + col;
      const __nv_bfloat16* src = a.lat;  // any valid address when nothing is read
      bool valid = false;
      if (in && col < a.nope) {
        src = a.kv + at;
        valid = true;
      } else if (in && col < qk) {
        src = a.lat + row * entry + a.latent + (col - a.nope);
        valid = true;
      }
      cp_async16(ks + r * kQs + col, src, valid);
      if constexpr (SPLIT) {
        const bool nope_col = in && col < a.nope;
        cp_async16(ks_lo + r * kQs + col, nope_col ? a.kv_lo + at : a.lat, nope_col);
      }
    }
  };
  auto load_v = [&](int kb) {
    for (int idx = threadIdx.x; idx < kRowsK * (DV / 8); idx += kThreads) {
      const int r = idx / (DV / 8), col = (idx % (DV / 8)) * 8;
      const int64_t at = (ch.buf_row + kb + r) * kv_width + h * (a.nope + a.v) + a.nope + col;
      const bool valid = kb + r < nkeys && col < a.v;
      cp_async16(vs + r * kVs + col, valid ? a.kv + at : a.lat, valid);
      if constexpr (SPLIT) cp_async16(vs_lo + r * kVs + col, valid ? a.kv_lo + at : a.lat, valid);
    }
  };

  const int ntiles = (nkeys + kRowsK - 1) / kRowsK;
  if (ntiles > 0) {
    load_k(0);
    cp_async_commit();
  }
  // Q (fp32 in global memory) -> bf16, round to nearest (split: and the remainder); zero rows
  // past the sequence and padding columns. The first barrier of the key loop publishes it.
  for (int idx = threadIdx.x; idx < kRowsQ * (QK / 4); idx += kThreads) {
    const int r = idx / (QK / 4), col = (idx % (QK / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < n_rows && col < qk)
      v = *reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(ch.q_row + tile.q0 + r) * a.heads + h) * qk +
                                           col);
    if (col >= a.nope) {  // the rope part (nope is a multiple of 8: a float4 lies in one part)
      v.x *= a.q_rope_scale;
      v.y *= a.q_rope_scale;
      v.z *= a.q_rope_scale;
      v.w *= a.q_rope_scale;
    }
    uint2 hi, lo;
    split_bf16(v.x, v.y, hi.x, lo.x);
    split_bf16(v.z, v.w, hi.y, lo.y);
    *reinterpret_cast<uint2*>(qs + r * kQs + col) = hi;
    if constexpr (SPLIT) *reinterpret_cast<uint2*>(qs_lo + r * kQs + col) = lo;
  }

  // Softmax state of rows g and g + 8 of this warp: m in the exp2 domain; l is this thread's
  // partial sum over its columns (the quad's sum is the row's), so only lane c == 0 carries a
  // loaded l.
  float o[kNo][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < kNo; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  if (!first) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r;
      if (row >= n_rows) continue;
      const int64_t t = ch.q_row + tile.q0 + row;
      const float* src = a.out + t * a.heads * a.v + h * a.v;
#pragma unroll
      for (int j = 0; j < kNo; ++j)
        if (j * 8 < a.v) {
          const float2 v = *reinterpret_cast<const float2*>(src + j * 8 + 2 * c);
          o[j][2 * r] = v.x;
          o[j][2 * r + 1] = v.y;
        }
      const float2 ml = *reinterpret_cast<const float2*>(a.ml + (t * a.heads + h) * 2);
      m[r] = ml.x;
      l[r] = c == 0 ? ml.y : 0.0f;
    }
  }

  const float scale_log2 = a.scale * 1.4426950408889634f;
  const int wrow0 = qpos0 + warp * 16;  // position of this warp's first row
  for (int t = 0; t < ntiles; ++t) {
    const int kb = t * kRowsK;
    load_v(kb);
    cp_async_commit();
    cp_async_wait<1>();  // K(t) has landed (V(t) may still be in flight)
    __syncthreads();

    // S[16 x kRowsK] = Q · K(t)ᵀ for this warp's rows; k-steps past qk (padding) are skipped, and
    // so is hi·lo over the k_pe columns (their lo is zero).
    float s[kNt][4];
#pragma unroll
    for (int j = 0; j < kNt; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < QK; k0 += 16) {
      if (k0 >= qk) break;
      const int q_at = (warp * 16 + (lane & 15)) * kQs + k0 + (lane >> 4) * 8;
      uint32_t qa[4], ql[4];
      ldmatrix_x4(qa, qs + q_at);
      if constexpr (SPLIT) ldmatrix_x4(ql, qs_lo + q_at);
      const bool k_lo = SPLIT && k0 < a.nope;
#pragma unroll
      for (int j = 0; j < kNt; j += 2) {
        const int k_at = (j * 8 + (lane & 7) + ((lane >> 4) << 3)) * kQs + k0 + ((lane >> 3) & 1) * 8;
        uint32_t kf[4];
        ldmatrix_x4(kf, ks + k_at);
        mma_bf16(s[j], qa, kf[0], kf[1]);
        mma_bf16(s[j + 1], qa, kf[2], kf[3]);
        if constexpr (SPLIT) {
          mma_bf16(s[j], ql, kf[0], kf[1]);
          mma_bf16(s[j + 1], ql, kf[2], kf[3]);
          if (k_lo) {
            uint32_t kl[4];
            ldmatrix_x4(kl, ks_lo + k_at);
            mma_bf16(s[j], qa, kl[0], kl[1]);
            mma_bf16(s[j + 1], qa, kl[2], kl[3]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with ks
    const bool more = t + 1 < ntiles;
    if (more) {
      load_k(kb + kRowsK);
      cp_async_commit();
    }

    // Scale; mask keys past the slice's end or past the row's own position (causal). Only tiles
    // that reach the diagonal or the slice's end need the test.
    const int kpos0 = ch.c0 + kb;  // position of this tile's first key
    const bool need_mask = kb + kRowsK > nkeys || kpos0 + kRowsK - 1 > wrow0;
#pragma unroll
    for (int j = 0; j < kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kb + j * 8 + 2 * c + (e & 1);
        const int qpos = wrow0 + g + 8 * (e >> 1);
        float v = s[j][e] * scale_log2;
        if (need_mask && (key >= nkeys || ch.c0 + key > qpos)) v = -INFINITY;
        s[j][e] = v;
      }
    float m_use[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int j = 0; j < kNt; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row with every key masked so far keeps m = -inf; subtracting 0 then gives p = 0, not NaN.
      m_use[r] = mx == -INFINITY ? 0.0f : mx;
      alpha[r] = exp2f(m[r] - m_use[r]);
      m[r] = mx;
    }
    // P = exp2(S - m), fp32 row sums; P rounded to bf16 (split: and the remainder) straight into
    // the A fragments of P·V.
    uint32_t pa[kRowsK / 16][4], pl[kRowsK / 16][4];
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      const float p0 = exp2f(s[j][0] - m_use[0]), p1 = exp2f(s[j][1] - m_use[0]);
      const float p2 = exp2f(s[j][2] - m_use[1]), p3 = exp2f(s[j][3] - m_use[1]);
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      // A fragment of k-step j/2: a0/a1 = keys 0-7 (rows g, g+8), a2/a3 = keys 8-15.
      split_bf16(p0, p1, pa[j / 2][(j & 1) * 2], pl[j / 2][(j & 1) * 2]);
      split_bf16(p2, p3, pa[j / 2][(j & 1) * 2 + 1], pl[j / 2][(j & 1) * 2 + 1]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];
#pragma unroll
    for (int j = 0; j < kNo; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }

    if (more)
      cp_async_wait<1>();  // V(t) has landed; K(t+1) may still be in flight
    else
      cp_async_wait<0>();
    __syncthreads();
    // O[16 x DV] += P[16 x kRowsK] · V(t)[kRowsK x DV]; column pairs past v (padding) are skipped.
#pragma unroll
    for (int k = 0; k < kRowsK / 16; ++k)
#pragma unroll
      for (int j = 0; j < kNo; j += 2) {
        if (j * 8 >= a.v) break;
        const int v_at = (k * 16 + (lane & 15)) * kVs + j * 8 + (lane >> 4) * 8;
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, vs + v_at);
        mma_bf16(o[j], pa[k], vf[0], vf[1]);
        mma_bf16(o[j + 1], pa[k], vf[2], vf[3]);
        if constexpr (SPLIT) {
          uint32_t vl[4];
          ldmatrix_x4_trans(vl, vs_lo + v_at);
          mma_bf16(o[j], pa[k], vl[0], vl[1]);
          mma_bf16(o[j + 1], pa[k], vl[2], vl[3]);
          mma_bf16(o[j], pl[k], vf[0], vf[1]);
          mma_bf16(o[j + 1], pl[k], vf[2], vf[3]);
        }
      }
    __syncthreads();  // every warp is done with vs before the next V load
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    if (row >= n_rows) continue;
    const int64_t t = ch.q_row + tile.q0 + row;
    float* dst = a.out + t * a.heads * a.v + h * a.v;
    // Every row sees key 0 in the first slice, so l > 0 once the last slice is done.
    const float inv = last ? 1.0f / l[r] : 1.0f;
#pragma unroll
    for (int j = 0; j < kNo; ++j)
      if (j * 8 < a.v)
        *reinterpret_cast<float2*>(dst + j * 8 + 2 * c) = make_float2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (!last && c == 0) *reinterpret_cast<float2*>(a.ml + (t * a.heads + h) * 2) = make_float2(m[r], l[r]);
  }
}

template <int QK, int DV, bool SPLIT, int ROWS>
constexpr int64_t smem_bytes() {
  constexpr int64_t parts = SPLIT ? 2 : 1, rows_k_ = kRowsKOf<SPLIT>;
  return parts * (ROWS * (QK + kPad) + rows_k_ * (QK + kPad) + rows_k_ * (DV + kPad)) * 2;
}

// The compiled shapes, cheapest first; a model's dims run on the first that covers them.
struct Shape {
  int qk, v;
};
constexpr Shape kShapes[] = {{32, 32}, {64, 32}, {64, 64}, {128, 128}, {192, 128}};

int pick_shape(int64_t qk, int64_t v) {
  for (int i = 0; i < static_cast<int>(sizeof(kShapes) / sizeof(kShapes[0])); ++i)
    if (qk <= kShapes[i].qk && v <= kShapes[i].v) return i;
  return -1;
}

template <int QK, int DV, bool SPLIT, int ROWS>
void launch_shape(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s) {
  constexpr int64_t smem = smem_bytes<QK, DV, SPLIT, ROWS>();
  static_assert(smem <= 99 * 1024, "the prefill kernel must fit SM120's 99 KB of shared memory a block");
  // Above the 48 KB default for the larger shapes; within every target's opt-in limit.
  allow_dynamic_smem(prefill_attend_kernel<QK, DV, SPLIT, ROWS>, static_cast<int>(smem));
  dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(a.heads));
  launch_plain(prefill_attend_kernel<QK, DV, SPLIT, ROWS>, grid, threads_for(ROWS), smem, s, a);
}

// Split precision keeps 64 rows (its hi and lo copies of 128 would not fit).
template <int QK, int DV>
void launch_precision(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s) {
  if (a.split)
    launch_shape<QK, DV, true, 64>(a, num_tiles, s);
  else if (a.query_rows == 128)
    launch_shape<QK, DV, false, 128>(a, num_tiles, s);
  else
    launch_shape<QK, DV, false, 64>(a, num_tiles, s);
}

template <int QK, int DV>
int64_t smem_for(bool split, int64_t rows) {
  return split ? smem_bytes<QK, DV, true, 64>()
               : (rows == 128 ? smem_bytes<QK, DV, false, 128>() : smem_bytes<QK, DV, false, 64>());
}

// Eight consecutive cache values of a row as 8 bf16 (one 16-byte vector): a bf16 cache as it is,
// an fp8 cache decoded exactly (8 bytes in).
__device__ inline uint4 load8_as_bf16(const __nv_bfloat16* row, int i) {
  return reinterpret_cast<const uint4*>(row)[i];
}
__device__ inline uint4 load8_as_bf16(const uint8_t* row, int i) {
  const uint2 raw = reinterpret_cast<const uint2*>(row)[i];
  const __nv_bfloat162 b0 = kvfp8::decode2_bf16(static_cast<uint16_t>(raw.x & 0xffffu));
  const __nv_bfloat162 b1 = kvfp8::decode2_bf16(static_cast<uint16_t>(raw.x >> 16));
  const __nv_bfloat162 b2 = kvfp8::decode2_bf16(static_cast<uint16_t>(raw.y & 0xffffu));
  const __nv_bfloat162 b3 = kvfp8::decode2_bf16(static_cast<uint16_t>(raw.y >> 16));
  uint4 out;
  out.x = *reinterpret_cast<const uint32_t*>(&b0);
  out.y = *reinterpret_cast<const uint32_t*>(&b1);
  out.z = *reinterpret_cast<const uint32_t*>(&b2);
  out.w = *reinterpret_cast<const uint32_t*>(&b3);
  return out;
}

// One block per (chunk, 16 rows); each thread writes 16-byte vectors of bf16 latents.
constexpr int kGatherRows = 16;
template <typename CacheT>
__global__ void gather_latents_kernel(const CacheT* cache, int page, int entry, const int32_t* tables,
                                      const PrefillChunk* chunks, __nv_bfloat16* lat) {
  const PrefillChunk ch = chunks[blockIdx.y];
  const int r0 = blockIdx.x * kGatherRows;
  const int rows = min(kGatherRows, ch.c1 - ch.c0 - r0);
  const int vec = entry / 8;
  for (int idx = threadIdx.x; idx < rows * vec; idx += blockDim.x) {
    const int r = idx / vec, i = idx % vec;
    const int pos = ch.c0 + r0 + r;
    const int64_t src_row = static_cast<int64_t>(tables[ch.table_offset + pos / page]) * page + pos % page;
    reinterpret_cast<uint4*>(lat + static_cast<int64_t>(ch.buf_row + r0 + r) * entry)[i] =
        load8_as_bf16(cache + src_row * entry, i);
  }
}

template <typename CacheT>
void launch_gather(const CacheT* cache, int64_t page, int64_t entry, const int32_t* tables, const PrefillChunk* chunks,
                   int64_t num_chunks, int64_t max_rows, __nv_bfloat16* lat, cudaStream_t s) {
  if (num_chunks == 0 || max_rows == 0) return;
  dim3 grid(static_cast<unsigned>((max_rows + kGatherRows - 1) / kGatherRows), static_cast<unsigned>(num_chunks));
  launch_plain(gather_latents_kernel<CacheT>, grid, 128, 0, s, cache, static_cast<int>(page), static_cast<int>(entry),
               tables, chunks, lat);
}

__global__ void split_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* hi, __nv_bfloat16* lo) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(x[i] - __bfloat162float(h));
  }
}

__global__ void scatter_rows_kernel(const float* y, int64_t width, const int64_t* rows, float* out) {
  const int64_t i = blockIdx.x;
  float* dst = out + rows[i] * width;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) dst[j] = y[i * width + j];
}

}  // namespace

bool mla_prefill_attend_supported(int64_t nope, int64_t rope, int64_t v, int64_t latent) {
  const bool multiples = nope % 8 == 0 && rope % 8 == 0 && v % 8 == 0 && latent % 8 == 0;
  return multiples && nope > 0 && v > 0 && pick_shape(nope + rope, v) >= 0;
}

int64_t mla_prefill_attend_smem_bytes(int64_t nope, int64_t rope, int64_t v, bool split, int64_t rows) {
  switch (pick_shape(nope + rope, v)) {
    case 0:
      return smem_for<32, 32>(split, rows);
    case 1:
      return smem_for<64, 32>(split, rows);
    case 2:
      return smem_for<64, 64>(split, rows);
    case 3:
      return smem_for<128, 128>(split, rows);
    case 4:
      return smem_for<192, 128>(split, rows);
    default:
      return 0;
  }
}

void launch_mla_gather_latents(const __nv_bfloat16* cache, int64_t page, int64_t entry, const int32_t* tables,
                               const PrefillChunk* chunks, int64_t num_chunks, int64_t max_rows, __nv_bfloat16* lat,
                               cudaStream_t s) {
  launch_gather(cache, page, entry, tables, chunks, num_chunks, max_rows, lat, s);
}

void launch_mla_gather_latents_fp8(const uint8_t* cache, int64_t page, int64_t entry, const int32_t* tables,
                                   const PrefillChunk* chunks, int64_t num_chunks, int64_t max_rows, __nv_bfloat16* lat,
                                   cudaStream_t s) {
  launch_gather(cache, page, entry, tables, chunks, num_chunks, max_rows, lat, s);
}

int64_t mla_prefill_query_rows(bool split, int64_t wanted) { return !split && wanted == 128 ? 128 : 64; }

void launch_mla_prefill_attend(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s) {
  if (num_tiles == 0) return;
  switch (pick_shape(a.nope + a.rope, a.v)) {
    case 0:
      launch_precision<32, 32>(a, num_tiles, s);
      break;
    case 1:
      launch_precision<64, 32>(a, num_tiles, s);
      break;
    case 2:
      launch_precision<64, 64>(a, num_tiles, s);
      break;
    case 3:
      launch_precision<128, 128>(a, num_tiles, s);
      break;
    case 4:
      launch_precision<192, 128>(a, num_tiles, s);
      break;
    default:
      break;  // the host side checked mla_prefill_attend_supported
  }
}

void launch_split_bf16(const float* x, int64_t n, __nv_bfloat16* hi, __nv_bfloat16* lo, cudaStream_t s) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
  launch_plain(split_bf16_kernel, static_cast<unsigned>(blocks), 256, 0, s, x, n, hi, lo);
}

void launch_scatter_rows(const float* y, int64_t width, const int64_t* rows, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) launch_plain(scatter_rows_kernel, static_cast<unsigned>(n), 128, 0, s, y, width, rows, out);
}

}  // namespace tessera::ops::cuda
