// MLA prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a only), for DeepSeek-V3's head
// dims (qk = 128 + 64, v = 128), bf16 precision: the same work and operand rounding as
// prefill_attend_kernel (mla_prefill.cu) in bf16, on the tensor-core instructions that reach
// Hopper's rate. mma.sync runs the H100 at ~160 TFLOP/s there (docs/PERFORMANCE.md: 29-32% of an
// 8192-token prefill's busy time).
//
// A block: 128 query rows of one chunk and one head, two warpgroups of 64 rows (each one wgmma M).
// Key tiles of 128 positions stream through two shared-memory stages by cp.async (the tile after
// next is issued once every thread is past the tile that used its stage):
//   S[64 x 128] = Q · K(t)ᵀ     m64n128k16 x 12 (qk 192), Q and K from shared memory, K-major
//   O[64 x 128] += P · V(t)     m64n128k16 x 8 (128 keys), P from registers, V transposed (MN-major)
// and between them the online softmax in fp32 (exp2 domain, rows over the 4 lanes of a quad, as in
// the mma.sync kernel). A warpgroup whose rows all precede a tile's first key skips the tile (the
// causal diagonal of a 128-row block spans two warpgroups).
// Shared memory (bf16, 128-byte swizzled: wgmma_primitives.cuh): Q 128 x 192 (3 column blocks of
// 16 KB), per stage K 128 x 192 (3 blocks) and V 128 x 128 (2 blocks): 48 + 2 x 80 KB + 1 KB of
// alignment slack = 209 KB, one block an SM (Hopper only: SM120's 99 KB keeps the mma.sync kernel).
// Tiles are the grid's x and heads its y, as in the mma.sync kernel (no tile-count limit; the
// blocks resident at once share a head's K and V in L2, though heads on x measured the same on an
// H100: the kernel is not bound by reading K/V). A head's tiles run heaviest first (the last query
// rows see the most keys), so that the light ones fill the last wave.
//
// Register fragments of an m64nN fp32 accumulator (PTX ISA, wgmma "Register Fragments"): thread i
// of the warpgroup, warp w = i / 32, lane = i % 32, g = lane / 4, c = lane % 4 holds
// d[4j + 2a + b] = D[16 w + g + 8 a][8 j + 2 c + b]; the S accumulator's bf16 pairs are the A
// fragments of P · V as they lie (the layout of sm90_wgmma.cu).
#include <cfloat>
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/ptx/wgmma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kNope = 128, kRope = 64, kQk = kNope + kRope, kDv = 128;
constexpr int kRowsQ = 128;  // query rows a block: two warpgroups of 64
constexpr int kRowsK = 128;  // keys a tile
constexpr int kThreads = 256;
constexpr int kRowsWg = 64;  // a warpgroup's rows: one wgmma M
static_assert(kRowsQ == 2 * kRowsWg && kThreads == 2 * 128, "two warpgroups");
constexpr int kCols = 64;                   // bf16 columns of a 128-byte swizzled block
constexpr int kQBlocks = kQk / kCols;       // 3 column blocks of Q and of K
constexpr int kVBlocks = kDv / kCols;       // 2 of V
constexpr int kBlockBytesQ = kRowsQ * 128;  // 16 KB
constexpr int kBlockBytesK = kRowsK * 128;  // 16 KB (K and V)
constexpr int kQOff = 0;
constexpr int kKvOff = kQOff + kQBlocks * kBlockBytesQ;            // 48 KB
constexpr int kStageBytes = (kQBlocks + kVBlocks) * kBlockBytesK;  // 80 KB: K's blocks, then V's
constexpr int kStages = 2;
constexpr int kSmemUsed = kKvOff + kStages * kStageBytes;  // 208 KB
constexpr int kSmemBytes = kSmemUsed + 1024;               // the dynamic base is only 16-byte aligned
static_assert(kSmemBytes <= 227 * 1024, "must fit the 227 KB a block may opt in to on sm_90");
static_assert(kKvOff % 1024 == 0 && kStageBytes % 1024 == 0 && kBlockBytesK % 1024 == 0,
              "swizzle atoms are 1024-byte aligned");
// cp.async copies of a tile a thread: K 128 rows x 24 chunks of 16 bytes, V 128 x 16.
constexpr int kKCopies = kRowsK * kQk / 8 / kThreads, kVCopies = kRowsK * kDv / 8 / kThreads;
static_assert(kKCopies * kThreads * 8 == kRowsK * kQk && kVCopies * kThreads * 8 == kRowsK * kDv, "whole rounds");

// Each tile's copies of the next tile are issued before its S wgmmas. Issuing S first, so that the
// tensor core works while the threads issue their ~20 cp.async, was 3-4% slower on an H200
// (docs/PERFORMANCE.md, 2026-12-06).
__global__ void __launch_bounds__(kThreads, 1) prefill_attend_wgmma_kernel(PrefillAttendArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace mma;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;
  unsigned char* smem = smem_raw + pad;
  const uint32_t s_base = raw_addr + pad;  // 1024-aligned shared address of `smem`

  const PrefillTile tile = a.tiles[gridDim.x - 1 - blockIdx.x];  // heaviest first (see above)
  const PrefillChunk ch = a.chunks[tile.chunk];
  const int h = blockIdx.y;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, wwarp = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const int kv_width = a.heads * (kNope + kDv), entry = a.latent + kRope;
  const int n_rows = min(kRowsQ, ch.n_q - tile.q0);  // valid query rows of this block
  const int qpos0 = ch.start_pos + tile.q0;          // absolute position of row 0
  // Keys this block sees: the slice's positions up to its last query row's (causal).
  const int nkeys = max(0, min(ch.c1, qpos0 + n_rows) - ch.c0);
  const bool first = ch.flags & kChunkFirst, last = ch.flags & kChunkLast;
  if (nkeys == 0 && !last) return;  // the state of these rows passes through unchanged
  // This warpgroup's rows and the keys they see.
  const int wg_rows = max(0, min(kRowsWg, n_rows - wg * kRowsWg));
  const int wg_keys = wg_rows == 0 ? 0 : max(0, min(ch.c1, qpos0 + wg * kRowsWg + wg_rows) - ch.c0);

  // Tile t into `stage`: K row r = [K_nope(h) | k_pe] of key c0 + 128 t + r, V row r = V(h); keys
  // past the slice's end are zero-filled (their probabilities are 0, and 0 x stale data could be
  // NaN). One cp.async group a tile.
  auto load_tile = [&](int t, int stage) {
    unsigned char* dst = smem + kKvOff + stage * kStageBytes;
    const int kb = t * kRowsK;
#pragma unroll
    for (int i = 0; i < kKCopies; ++i) {
      const int idx = tid + i * kThreads, blk = idx >> 10, r = (idx >> 3) & 127, chunk = idx & 7;
      const int col = blk * kCols + chunk * 8;
      const int64_t row = ch.buf_row + kb + r;
      const bool in = kb + r < nkeys;
      const __nv_bfloat16* src = a.lat;  // any valid address when nothing is read
      if (in)
        src = col < kNope ? a.kv + row * kv_width + h * (kNope + kDv) + col
                          : a.lat + row * entry + a.latent + (col - kNope);
      cp_async16(dst + blk * kBlockBytesK + wgmma::sw128_offset(r, chunk), src, in);
    }
#pragma unroll
    for (int i = 0; i < kVCopies; ++i) {
      const int idx = tid + i * kThreads, blk = idx >> 10, r = (idx >> 3) & 127, chunk = idx & 7;
      const int64_t row = ch.buf_row + kb + r;
      const bool in = kb + r < nkeys;
      const __nv_bfloat16* src =
          in ? a.kv + row * kv_width + h * (kNope + kDv) + kNope + blk * kCols + chunk * 8 : a.lat;
      cp_async16(dst + (kQBlocks + blk) * kBlockBytesK + wgmma::sw128_offset(r, chunk), src, in);
    }
    cp_async_commit();
  };

  const int ntiles = (nkeys + kRowsK - 1) / kRowsK;
  if (ntiles > 0) load_tile(0, 0);

  // Q (fp32) -> bf16, round to nearest, into the swizzled layout; the rope part times q_rope_scale
  // first; rows past the chunk are zero.
  for (int idx = tid; idx < kRowsQ * (kQk / 4); idx += kThreads) {
    const int r = idx / (kQk / 4), col = (idx % (kQk / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < n_rows)
      v = *reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(ch.q_row + tile.q0 + r) * a.heads + h) * kQk +
                                           col);
    if (col >= kNope) {
      v.x *= a.q_rope_scale;
      v.y *= a.q_rope_scale;
      v.z *= a.q_rope_scale;
      v.w *= a.q_rope_scale;
    }
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    const int blk = col / kCols, chunk = (col % kCols) / 8;
    *reinterpret_cast<uint2*>(smem + kQOff + blk * kBlockBytesQ + wgmma::sw128_offset(r, chunk) + (col % 8) * 2) =
        packed;
  }
  wgmma::fence_proxy_async();  // Q is read by wgmma; the first barrier of the loop publishes it

  // Softmax state of rows r0 = 16 w + g and r1 = r0 + 8 of this warpgroup: m in the exp2 domain;
  // l is this thread's partial sum over its columns (the quad's sum is the row's), so only lane
  // c == 0 carries a loaded l.
  const int r0 = wg * kRowsWg + 16 * wwarp + g;  // row in the block
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  if (!first) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + 8 * r;
      if (row >= n_rows) continue;
      const int64_t t = ch.q_row + tile.q0 + row;
      const float* src = a.out + t * a.heads * kDv + h * kDv;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float2 v = *reinterpret_cast<const float2*>(src + j * 8 + 2 * c);
        o[4 * j + 2 * r] = v.x;
        o[4 * j + 2 * r + 1] = v.y;
      }
      const float2 ml = *reinterpret_cast<const float2*>(a.ml + (t * a.heads + h) * 2);
      m[r] = ml.x;
      l[r] = c == 0 ? ml.y : 0.0f;
    }
  }

  const float scale_log2 = a.scale * 1.4426950408889634f;
  const int wrow0 = qpos0 + wg * kRowsWg + 16 * wwarp;          // position of this warp's first row
  const uint32_t q_addr = s_base + kQOff + wg * kRowsWg * 128;  // this warpgroup's 64 rows of each block
  for (int t = 0; t < ntiles; ++t) {
    const int stage = t & 1, kb = t * kRowsK;
    cp_async_wait<0>();          // this thread's copies of tile t have landed
    wgmma::fence_proxy_async();  // ... and are visible to wgmma
    __syncthreads();             // everyone's have; everyone is past tile t - 1, whose stage is free
    if (t + 1 < ntiles) load_tile(t + 1, stage ^ 1);
    if (kb >= wg_keys) continue;  // every row of this warpgroup precedes the tile (uniform in it)
    const uint32_t k_addr = s_base + kKvOff + stage * kStageBytes;

    // S = Q · K(t)ᵀ over 3 column blocks x 4 k-steps of 16.
    float s[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.0f;
    wgmma::fence_operands(s);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kQk / 16; ++kk) {
      const uint32_t off_q = (kk / 4) * kBlockBytesQ + (kk % 4) * 32, off_k = (kk / 4) * kBlockBytesK + (kk % 4) * 32;
      wgmma::wgmma_m64n128k16_ss(s, wgmma::desc_sw128(q_addr + off_q, 16, 1024),
                                 wgmma::desc_sw128(k_addr + off_k, 16, 1024), kk > 0 ? 1 : 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);

    // Scale; mask keys past the slice's end or past the row's own position (causal). Only tiles
    // that reach the diagonal or the slice's end need the test.
    const int kpos0 = ch.c0 + kb;
    const bool need_mask = kb + kRowsK > nkeys || kpos0 + kRowsK - 1 > wrow0;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kb + 8 * j + 2 * c + (e & 1);
        const int qpos = wrow0 + g + 8 * (e >> 1);
        float v = s[4 * j + e] * scale_log2;
        if (need_mask && (key >= nkeys || ch.c0 + key > qpos)) v = -INFINITY;
        s[4 * j + e] = v;
      }
    float m_use[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row with every key masked so far keeps m = -inf; subtracting 0 then gives p = 0, not NaN.
      m_use[r] = mx == -INFINITY ? 0.0f : mx;
      alpha[r] = exp2f(m[r] - m_use[r]);
      m[r] = mx;
    }
    // P = exp2(S - m), fp32 row sums; p[j][r] = the bf16 pair (P[row r][8 j + 2 c], .. + 1).
    uint32_t p[16][2];
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float p0 = exp2f(s[4 * j + 2 * r] - m_use[r]), p1 = exp2f(s[4 * j + 2 * r + 1] - m_use[r]);
        rs[r] += p0 + p1;
        const __nv_bfloat162 pair = __floats2bfloat162_rn(p0, p1);
        p[j][r] = *reinterpret_cast<const uint32_t*>(&pair);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }

    // O += P · V(t): V's two column blocks as one transposed operand of N = 128 (LBO = the block
    // distance), 16 keys (2048 bytes of rows) a k-step.
    const uint32_t v_addr = k_addr + kQBlocks * kBlockBytesK;
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kRowsK / 16; ++kk) {
      const uint32_t a_frag[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
      wgmma::wgmma_m64n128k16_rs_tb(o, a_frag, wgmma::desc_sw128(v_addr + kk * 16 * 128, kBlockBytesK, 1024), 1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(o);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    if (row >= n_rows) continue;
    const int64_t t = ch.q_row + tile.q0 + row;
    float* dst = a.out + t * a.heads * kDv + h * kDv;
    // Every row sees key 0 in the first slice, so l > 0 once the last slice is done.
    const float inv = last ? 1.0f / l[r] : 1.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<float2*>(dst + j * 8 + 2 * c) = make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    if (!last && c == 0) *reinterpret_cast<float2*>(a.ml + (t * a.heads + h) * 2) = make_float2(m[r], l[r]);
  }
#else
  // Built for an architecture without wgmma: the host never selects this kernel there
  // (mla_prefill_uses_wgmma), so reaching it is a bug.
  __trap();
#endif
}

}  // namespace

bool mla_prefill_wgmma_shape(int64_t nope, int64_t rope, int64_t v) {
  return nope == kNope && rope == kRope && v == kDv;
}

int64_t mla_prefill_wgmma_smem_bytes() { return kSmemBytes; }

void launch_mla_prefill_attend_wgmma(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s) {
  if (num_tiles == 0) return;
  TESSERA_CHECK(!a.split && a.query_rows == kRowsQ && mla_prefill_wgmma_shape(a.nope, a.rope, a.v) &&
                    a.latent % 8 == 0 && a.heads <= 65535,
                "mla prefill wgmma: bf16 tiles of {} rows at qk 128 + 64, v 128 and at most 65535 heads (got {}, "
                "{} rows, {} + {}, v {}, {} heads)",
                kRowsQ, a.split ? "split" : "bf16", a.query_rows, a.nope, a.rope, a.v, a.heads);
  allow_dynamic_smem(prefill_attend_wgmma_kernel, kSmemBytes);
  dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(a.heads));
  launch_plain(prefill_attend_wgmma_kernel, grid, kThreads, kSmemBytes, s, a);
}

}  // namespace tessera::ops::cuda
