// MLA decode attention on Hopper's warpgroup MMA (wgmma, sm_90a only), for 64 heads a block:
// the 64 heads are one wgmma's M, so a block does the work of four KV-major blocks with each cache
// tile read from shared memory once per 64 heads instead of once per 16.
//   S[h, p]  = Q[h, :] · K[p, :]           m64n64k16 x 36 (K dim 576), warpgroup 0
//   O[h, l] += P[h, p] · V[p, l]           m64n256k16 x 4 per warpgroup; warpgroup w owns the
//                                          latent columns [256 w, 256 w + 256)
// V is the first 512 columns of the same cache tile, read as a transposed (MN-major) operand.
// Tiles of 64 cache positions (576 bf16 each, 72 KB) stream through two shared-memory stages, two
// tiles in flight; Q (scaled, bf16) stays in shared memory. Warpgroup 0 computes S, the online
// softmax in fp32 (rows spread over the 4 lanes of a quad), hands P (bf16) and the rescale factors
// to warpgroup 1 through shared memory, and multiplies its own half of P·V with P straight from
// registers while warpgroup 1 runs the other half. The two meet only at one-way named barriers,
// and each refills the column blocks of a stage it read last (0-3 and the rope block 8 for
// warpgroup 0, 4-7 for warpgroup 1) as soon as it is done with them.
// Loads: with pages of a multiple of 64 positions the tiles come by TMA (v6): one thread of each
// warpgroup issues its warpgroup's 64 x 64 boxes of a tile through a tensor map over the cache
// (L2 evict-first), completion on an mbarrier per stage and warpgroup, so the 256 MMA threads no
// longer spend 18 cp.async copies each and a page-table lookup per tile, and the copies are not
// bounded by the per-SM limit on outstanding cp.async (L1) requests. Other page sizes keep the
// per-thread cp.async loads of v5 (the same kernel with kTma = false).
// Shared memory per block: Q 72 KB + 2 x 72 KB of K + 8 KB of P + 256 B + 32 B of mbarriers + 1 KB
// alignment slack = 225.3 KB (H100/H200 allow 227 KB a block, so one block per SM; 256 threads).
// Partials per context split are merged by the combine kernel (attention.cu), as for the other
// decode kernels. With `kPair` (TESSERA_MLA_WGMMA_PAIRS) each part is two blocks of half the
// context each, a cluster of two that merges its halves through distributed shared memory before
// writing one partial (at the kernel's end): at batch 1 the 64 parts the combine can afford then
// keep 128 SMs busy instead of 64.
//
// Layouts and descriptors: wgmma_primitives.cuh. Register fragments of an m64nN fp32 accumulator
// (PTX ISA, wgmma "Register Fragments", matrix D): thread i of the warpgroup, warp w = i / 32,
// lane = i % 32, g = lane / 4, c = lane % 4 holds d[4j + 2a + b] = D[16 w + g + 8 a][8 j + 2 c + b].
#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap

#include <map>
#include <mutex>
#include <utility>

#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/ptx/tma_primitives.cuh"
#include "ops/cuda/ptx/wgmma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"
#include "ops/cuda/runtime/tensor_map.h"

namespace tessera::ops::cuda {

namespace {

constexpr int kHeads = 64;  // heads per block = wgmma M
constexpr int kLat = 512, kRope = 64, kEntry = kLat + kRope;
constexpr int kTp = 64;                            // cache positions per tile
constexpr int kBlockCols = 64;                     // bf16 columns per 128-byte swizzled block
constexpr int kBlocks = kEntry / kBlockCols;       // 9 column blocks per row of Q or K
constexpr int kBlockBytes = 64 * 128;              // 64 rows (heads or positions) x 128 bytes
constexpr int kTileBytes = kBlocks * kBlockBytes;  // one 64 x 576 bf16 matrix: 72 KB
constexpr int kStages = 2;
constexpr int kThreads = 256;  // two warpgroups
constexpr int kQOff = 0;
constexpr int kKOff = kQOff + kTileBytes;
constexpr int kPOff = kKOff + kStages * kTileBytes;
constexpr int kAlphaOff = kPOff + kBlockBytes;   // float[64]: this tile's rescale factor per head
constexpr int kBarOff = kAlphaOff + kHeads * 4;  // TMA variant: mbarrier [stage][warpgroup], 8 bytes each
constexpr int kSmemUsed = kBarOff + kStages * 2 * 8;
constexpr int kSmemBytes = kSmemUsed + 1024;  // the dynamic base is only 16-byte aligned
static_assert(kSmemBytes <= 227 * 1024, "must fit the 227 KB a block may opt in to on sm_90");
static_assert(kTp == 64 && kHeads == 64, "the MMA shapes below are m64n64k16 (S) and m64n256k16 x 2 (O)");
static_assert(kKOff % 1024 == 0 && kPOff % 1024 == 0 && kTileBytes % 1024 == 0, "swizzle atoms are 1024-aligned");
// The pair's merge, over Q's bytes once both blocks are done with their tiles: the peer's half of O
// (128 threads x 32 float4, 64 KB), then m and l of this block's heads and of the peer's.
constexpr int kPairOOff = kQOff, kPairMlOff = kPairOOff + 128 * 32 * 16;
static_assert(kPairMlOff + 2 * 2 * kHeads * 4 <= kTileBytes, "the pair's merge fits over Q");

// Named barrier ids (0 is __syncthreads).
enum NamedBarrier : int { kBarKReady = 1, kBarPReady = 2, kBarWg0 = 3, kBarWg1 = 4 };

// kTma: cache tiles come in by TMA (one thread per warpgroup issues a tile's 64 x 64 boxes through
// `cache_map`, completion on an mbarrier per stage and warpgroup); needs pages of a multiple of 64
// positions, so that a 64-aligned tile never crosses a page. Otherwise (false) every thread copies
// its rows with cp.async and `cache_map` is unused.
template <bool kTma, bool kPair>
__global__ void __launch_bounds__(kThreads, 1)
    attend_wgmma_kernel(const __grid_constant__ CUtensorMap cache_map, const float* __restrict__ q_full, int heads,
                        const TokenInfo* __restrict__ info, const int32_t* __restrict__ tables,
                        const __nv_bfloat16* __restrict__ cache, int page, float scale, float* __restrict__ o_part,
                        float* __restrict__ ml_part, bool early) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace mma;
  // Launched with launch_dependent: q_full and the cache's newest entries are the previous kernels'
  // output. With `early` (TESSERA_MLA_WGMMA_EARLY: a step of one new token a sequence) the first two
  // tiles' copies of rows earlier steps wrote go out before the wait, beside the kernel before's tail
  // (the step metadata is written before the step's first kernel).
  if (!early) pdl_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;
  unsigned char* smem = smem_raw + pad;
  const uint32_t s_base = raw_addr + pad;  // 1024-aligned shared address of `smem`
  float* alpha_s = reinterpret_cast<float*>(smem + kAlphaOff);

  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, wwarp = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const int r0 = 16 * wwarp + g, r1 = r0 + 8;  // this thread's accumulator rows (heads in the block)
  const int split = blockIdx.x, t = blockIdx.y, h0 = blockIdx.z * kHeads;
  const int tokens = gridDim.y;
  const TokenInfo ti = info[t];
  const MlaSplitRange range = mla_split_range(ti.pos, split, gridDim.x, kTp);
  const int begin = range.begin, end = range.end, ntiles = range.ntiles;

  // Cache tile loads, split by who reads what last: warpgroup 0 copies column blocks 0-3 (its V)
  // and 8 (rope, read only by S), warpgroup 1 blocks 4-7 (its V), so each refills its own blocks
  // of a stage as soon as it is done with them, with no barrier between the two.
  //
  // TMA: thread 0 of each warpgroup issues its warpgroup's boxes of a tile (64 positions x 64
  // columns, 8 KB each, 128-byte swizzled by the map as wgmma reads them) on the mbarrier of
  // (stage, warpgroup): one arrival with the byte count a phase, so tile `tile` completes phase
  // tile / 2 of its stage's barriers (parity (tile >> 1) & 1). A tile lies in one page (begin and
  // the page size are multiples of 64), so its first row's page-table entry places all 64 rows;
  // the issuing threads read it a tile ahead. Rows past the end of the context are whatever the
  // page holds: the last tile's are zeroed in shared memory before use (see below).
  //
  // cp.async: 2 threads per row; one page-table lookup per thread per tile, done a tile ahead. One
  // cp.async group per tile, committed even when the tile is past the end (then empty), so that
  // "all but the newest group" always means "everything up to this tile".
  const uint32_t bar_base = s_base + kBarOff;
  auto full_bar = [&](int stage, int w) -> uint32_t { return bar_base + 8 * (2 * stage + w); };
  uint64_t policy = 0;
  const int my_row = wtid >> 1, my_sub = wtid & 1;
  auto row_source = [&](int tile) -> const __nv_bfloat16* {
    if constexpr (kTma) {
      // Only the issuing thread looks up; the pointer carries the tile's first cache row.
      if (wtid != 0 || tile >= ntiles) return nullptr;
      const int pos = begin + tile * kTp;
      return cache + (static_cast<int64_t>(tables[ti.table_offset + pos / page]) * page + pos % page) * kEntry;
    } else {
      const int pos = begin + tile * kTp + my_row;
      if (tile >= ntiles || pos >= end) return nullptr;
      return cache + (static_cast<int64_t>(tables[ti.table_offset + pos / page]) * page + pos % page) * kEntry;
    }
  };
  auto load_tile = [&](int tile, const __nv_bfloat16* src, int stage) {
    const uint32_t dst_addr = s_base + kKOff + stage * kTileBytes;
    if constexpr (kTma) {
      if (wtid != 0 || tile >= ntiles) return;
      const int row = static_cast<int>((src - cache) / kEntry);  // < 2^31: checked by the host
      const uint32_t bar = full_bar(stage, wg);
      if (wg == 0) {
        tma::mbarrier_arrive_expect_tx(bar, 5 * kBlockBytes);
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          const int blk = j < 4 ? j : 8;
          tma::load_2d(dst_addr + blk * kBlockBytes, &cache_map, bar, blk * kBlockCols, row, policy);
        }
      } else {
        tma::mbarrier_arrive_expect_tx(bar, 4 * kBlockBytes);
#pragma unroll
        for (int blk = 4; blk < 8; ++blk)
          tma::load_2d(dst_addr + blk * kBlockBytes, &cache_map, bar, blk * kBlockCols, row, policy);
      }
    } else {
      unsigned char* dst = smem + kKOff + stage * kTileBytes;
      if (tile < ntiles) {
        if (wg == 0) {
#pragma unroll
          for (int j = 0; j < 20; ++j) {
            const int q = my_sub + 2 * j, blk = q < 32 ? q >> 3 : 8, ch = q & 7;  // 5 blocks x 8 chunks
            // Rows past the end are zero-filled: their probability is 0, and 0 x stale data could be NaN.
            cp_async16(dst + blk * kBlockBytes + wgmma::sw128_offset(my_row, ch),
                       src ? src + (blk * 8 + ch) * 8 : cache, src != nullptr);
          }
        } else {
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const int q = my_sub + 2 * j, blk = 4 + (q >> 3), ch = q & 7;  // 4 blocks x 8 chunks
            cp_async16(dst + blk * kBlockBytes + wgmma::sw128_offset(my_row, ch),
                       src ? src + (blk * 8 + ch) * 8 : cache, src != nullptr);
          }
        }
      }
      cp_async_commit();
    }
  };
  if constexpr (kTma) {
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < kStages * 2; ++i) tma::mbarrier_init(bar_base + 8 * i, 1);
      tma::fence_mbarrier_init();
    }
    if (wtid == 0) {
      tma::prefetch_map(&cache_map);
      policy = tma::evict_first_policy();
    }
    __syncthreads();  // the barriers are initialised before either warpgroup's first copy
  }
  // Two tiles in flight from the start: tile t + 2 is issued as soon as tile t's blocks are free,
  // so while a block waits for one tile the next is already on its way. With `early`, the tiles
  // whose rows all lie before the token's position are issued before the wait (tile 0 before tile
  // 1: cp.async's groups stay in tile order), the others after it.
  auto written_before = [&](int tile) { return min(begin + (tile + 1) * kTp, end) <= ti.pos; };
  if (early) {
    if (written_before(0)) load_tile(0, row_source(0), 0);
    if (written_before(1)) load_tile(1, row_source(1), 1);  // (then tile 0's rows are too)
    pdl_wait();
  }
  if (!early || !written_before(0)) load_tile(0, row_source(0), 0);
  if (!early || !written_before(1)) load_tile(1, row_source(1), 1);
  const __nv_bfloat16* next_src = row_source(2);

  // Q (pre-scaled, bf16) into the swizzled layout: 64 rows x 144 float4; all of a batch's loads
  // are issued before any is used. Splits past the visible context skip it.
  if (ntiles > 0) {
    const float4* q4 = reinterpret_cast<const float4*>(q_full + (static_cast<int64_t>(t) * heads + h0) * kEntry);
    constexpr int kVecs = kHeads * kEntry / 4, kBatch = 9;
    static_assert(kVecs % (kThreads * kBatch) == 0, "Q loads in whole batches");
#pragma unroll
    for (int b0 = 0; b0 < kVecs; b0 += kThreads * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = q4[b0 + tid + j * kThreads];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int idx = b0 + tid + j * kThreads;
        const int r = idx / (kEntry / 4), col = (idx % (kEntry / 4)) * 4;
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v[j].x * scale, v[j].y * scale);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(v[j].z * scale, v[j].w * scale);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        const int blk = col / kBlockCols, ch = (col % kBlockCols) / 8;
        *reinterpret_cast<uint2*>(smem + kQOff + blk * kBlockBytes + wgmma::sw128_offset(r, ch) + (col % 8) * 2) =
            packed;
      }
    }
  }
  wgmma::fence_proxy_async();  // Q is read by wgmma
  __syncthreads();

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_run[2] = {-FLT_MAX, -FLT_MAX}, l_run[2] = {0.0f, 0.0f};  // warpgroup 0: rows r0, r1

  // The two warpgroups run their own loops and meet only at named barriers, each used one way
  // (one warpgroup arrives, the other waits):
  //   kBarKReady: warpgroup 1's P·V of tile t - 1 is done (so P and alpha may be overwritten)
  //               and, with cp.async, its copies of tile t have landed
  //               (1 arrives, 0 waits: with cp.async before S, with TMA only before it writes
  //               P, so that its S of tile t runs beside warpgroup 1's P·V of tile t - 1)
  //   kBarPReady: P and alpha of tile t are in shared memory  (0 arrives, 1 waits, before P·V)
  // Neither side can arrive twice before the other has waited once (each arrival of a warpgroup
  // follows its wait on the other's previous arrival), so a barrier never mixes two tiles.
  const uint32_t q_addr = s_base + kQOff, p_addr = s_base + kPOff;
  if (wg == 0) {
    for (int tile = 0; tile < ntiles; ++tile) {
      const int stage = tile & 1;
      const uint32_t k_addr = s_base + kKOff + stage * kTileBytes;
      const int n = min(kTp, end - (begin + tile * kTp));  // valid positions in this tile
      if constexpr (kTma) {
        const uint32_t parity = (tile >> 1) & 1;
        tma::mbarrier_wait(full_bar(stage, 0), parity);  // blocks 0-3 and 8 (this warpgroup's copies)
        tma::mbarrier_wait(full_bar(stage, 1), parity);  // blocks 4-7 (warpgroup 1's)
        if (n < kTp) {
          // The last tile's rows past the end hold whatever the page held there: zero them in the
          // V blocks 0-7 (their probability is 0, and 0 x NaN would be NaN; S masks its columns
          // anyway). Warpgroup 1 reads blocks 4-7 only after kBarPReady, which follows this. The
          // stage is never refilled after the last tile.
          for (int idx = wtid; idx < (kTp - n) * 64; idx += 128) {
            const int row = n + (idx >> 6), blk = (idx >> 3) & 7, ch = idx & 7;
            *reinterpret_cast<uint4*>(smem + kKOff + stage * kTileBytes + blk * kBlockBytes +
                                      wgmma::sw128_offset(row, ch)) = make_uint4(0, 0, 0, 0);
          }
          wgmma::fence_proxy_async();               // the zeros are read by wgmma
          wgmma::named_barrier_sync(kBarWg0, 128);  // ... by every warp of this warpgroup
        }
        // kBarKReady (warpgroup 1 is done with the previous P) waits until P is written below, so
        // S of this tile can run beside the end of warpgroup 1's P·V of the previous one.
      } else {
        cp_async_wait<1>();          // this thread's copies of tile `tile` have landed (tile + 1 may not have)
        wgmma::fence_proxy_async();  // ... and are visible to wgmma
        // ... for every thread of both warpgroups (all 256 must arrive: warpgroup 1 after its copies).
        wgmma::named_barrier_sync(kBarKReady, kThreads);
      }

      // S = Q · Kᵀ over the 9 column blocks x 4 k-steps of 16.
      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = 0.0f;
      wgmma::fence_operands(s);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kEntry / 16; ++kk) {
        const uint32_t off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
        wgmma::wgmma_m64n64k16_ss(s, wgmma::desc_sw128(q_addr + off, 16, 1024),
                                  wgmma::desc_sw128(k_addr + off, 16, 1024), kk > 0 ? 1 : 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(s);

      // Online softmax over this tile's valid positions (columns >= n are past the end).
      float mx[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            float& x = s[4 * j + 2 * a + b];
            if (8 * j + 2 * c + b >= n) x = -FLT_MAX;
            mx[a] = fmaxf(mx[a], x);
          }
      float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        mx[a] = fmaxf(mx[a], __shfl_xor_sync(0xffffffffu, mx[a], 1));
        mx[a] = fmaxf(mx[a], __shfl_xor_sync(0xffffffffu, mx[a], 2));
        const float m_new = fmaxf(m_run[a], mx[a]);
        alpha[a] = __expf(m_run[a] - m_new);
        m_run[a] = m_new;
      }
      // p[j][a] = bf16 pair (P[row a][8 j + 2 c], P[row a][8 j + 2 c + 1]), row 0 = r0, 1 = r1.
      uint32_t p[8][2];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          const float p0 = __expf(s[4 * j + 2 * a] - m_run[a]), p1 = __expf(s[4 * j + 2 * a + 1] - m_run[a]);
          sum[a] += p0 + p1;
          const __nv_bfloat162 pair = __floats2bfloat162_rn(p0, p1);
          p[j][a] = *reinterpret_cast<const uint32_t*>(&pair);
        }
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        sum[a] += __shfl_xor_sync(0xffffffffu, sum[a], 1);
        sum[a] += __shfl_xor_sync(0xffffffffu, sum[a], 2);
        l_run[a] = l_run[a] * alpha[a] + sum[a];
      }
      // P and alpha for warpgroup 1, once it is done with the previous tile's (kBarKReady).
      if constexpr (kTma) wgmma::named_barrier_sync(kBarKReady, kThreads);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int a = 0; a < 2; ++a)  // P[row][8 j + 2 c ..]: chunk j of the row, bytes 4 c within it
          *reinterpret_cast<uint32_t*>(smem + kPOff + wgmma::sw128_offset(a ? r1 : r0, j) + 4 * c) = p[j][a];
      if (c == 0) {
        alpha_s[r0] = alpha[0];
        alpha_s[r1] = alpha[1];
      }
      wgmma::fence_proxy_async();  // P is read by wgmma
      wgmma::named_barrier_arrive(kBarPReady, kThreads);

      // O = alpha · O + P · V over latent columns [0, 256), P straight from registers: the
      // m64n64 accumulator of S is laid out as the A fragments of four k16 steps.
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
      }
      wgmma::fence_operands(o);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kTp / 16; ++kk) {
        const uint32_t a_frag[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
        wgmma::wgmma_m64n256k16_rs_tb(o, a_frag, wgmma::desc_sw128(k_addr + kk * 16 * 128, kBlockBytes, 1024), 1);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      // Every thread of this warpgroup is done with blocks 0-3 and 8 of the stage (S read all
      // nine, but warpgroup 1 refills 4-7 only after kBarPReady, which follows S).
      wgmma::named_barrier_sync(kBarWg0, 128);
      load_tile(tile + 2, next_src, stage);
      next_src = row_source(tile + 3);
    }
  } else {
    if (ntiles > 0) {
      if constexpr (!kTma) {
        cp_async_wait<1>();          // this thread's copies of tile 0 (tile 1 may still be in flight)
        wgmma::fence_proxy_async();  // ... visible to wgmma
      }
      wgmma::named_barrier_arrive(kBarKReady, kThreads);
    }
    for (int tile = 0; tile < ntiles; ++tile) {
      const int stage = tile & 1;
      const uint32_t k_addr = s_base + kKOff + stage * kTileBytes;
      // P and alpha of this tile; also every thread of this warpgroup has announced its copies of
      // the tile (all 256 arrive before anyone passes), so blocks 4-7 are complete. With TMA,
      // warpgroup 0 waited for them before S; this warpgroup waits on the barrier too (it has
      // completed, so at once) to see the copies itself.
      wgmma::named_barrier_sync(kBarPReady, kThreads);
      if constexpr (kTma) tma::mbarrier_wait(full_bar(stage, 1), (tile >> 1) & 1);
      const float a0 = alpha_s[r0], a1 = alpha_s[r1];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
      }
      wgmma::fence_operands(o);
      wgmma::fence();
      const uint32_t v_addr = k_addr + 4 * kBlockBytes;  // latent columns [256, 512)
#pragma unroll
      for (int kk = 0; kk < kTp / 16; ++kk)
        wgmma::wgmma_m64n256k16_ss_tb(o, wgmma::desc_sw128(p_addr + kk * 32, 16, 1024),
                                      wgmma::desc_sw128(v_addr + kk * 16 * 128, kBlockBytes, 1024), 1);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      // Blocks 4-7 of the stage are free (warpgroup 0's S finished before kBarPReady, and every
      // thread of this warpgroup has passed its P·V): refill them first, then announce tile + 1,
      // so that two tiles stay in flight while this warpgroup waits for the next one. (Its P·V
      // runs beside warpgroup 0's, which warpgroup 0 finishes before S of tile + 1 anyway.)
      wgmma::named_barrier_sync(kBarWg1, 128);
      load_tile(tile + 2, next_src, stage);
      next_src = row_source(tile + 3);
      if (tile + 1 < ntiles) {
        if constexpr (!kTma) {
          cp_async_wait<1>();  // this thread's copies of tile + 1 (tile + 2 may still be in flight)
          wgmma::fence_proxy_async();
        }
        wgmma::named_barrier_arrive(kBarKReady, kThreads);
      }
    }
  }

  // Partials: O unnormalised [part, t, h, 512]; m and l per head from warpgroup 0. With one part
  // (large batches) `o_part` is the output [t, h, 512] itself and O is normalised here, so that no
  // combine kernel runs: warpgroup 0 hands 1 / l to warpgroup 1 through alpha_s, once both are
  // done with the last tile's. A part is a split, or with kPair a cluster of two splits.
  constexpr int kPerPart = kPair ? 2 : 1;
  const int part = split / kPerPart;
  const bool direct = gridDim.x == kPerPart;
  float norm0 = 1.0f, norm1 = 1.0f;
  bool writes_ml = wg == 0;
  if constexpr (kPair) {
    // Block `rank` of the pair writes latent columns [256 rank, 256 rank + 256): warpgroup `rank`
    // merges its own O with the peer's same columns, which the peer's other warpgroup sent (the
    // same thread of it: the fragment layouts match); the other warpgroup only sends.
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = static_cast<int>(cl.block_rank());
    float4* o_in = reinterpret_cast<float4*>(smem + kPairOOff);
    float* ml_own = reinterpret_cast<float*>(smem + kPairMlOff);  // [64][2] this block's m, l
    float* ml_peer = ml_own + 2 * kHeads;                         // [64][2] the peer's
    cl.sync();  // both blocks are done with their tiles: Q's bytes are free in both
    if (wg == 0 && c == 0) {
      float* ml_there = cl.map_shared_rank(ml_peer, rank ^ 1);
      const float v[4] = {m_run[0], l_run[0], m_run[1], l_run[1]};
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        const int r = a ? r1 : r0;
        ml_own[2 * r] = ml_there[2 * r] = v[2 * a];
        ml_own[2 * r + 1] = ml_there[2 * r + 1] = v[2 * a + 1];
      }
    }
    if (wg != rank) {
      float4* o_there = cl.map_shared_rank(o_in, rank ^ 1);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        o_there[j * 128 + wtid] = make_float4(o[4 * j], o[4 * j + 1], o[4 * j + 2], o[4 * j + 3]);
    }
    cl.sync();  // the peer's O and both blocks' m and l have landed (and no block reads the other's after this)
    if (wg != rank) return;
    float f_own[2], f_peer[2];
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int r = a ? r1 : r0;
      const float m_a = ml_own[2 * r], m_b = ml_peer[2 * r], M = fmaxf(m_a, m_b);
      f_own[a] = __expf(m_a - M);
      f_peer[a] = __expf(m_b - M);
      m_run[a] = M;
      l_run[a] = f_own[a] * ml_own[2 * r + 1] + f_peer[a] * ml_peer[2 * r + 1];
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float4 x = o_in[j * 128 + wtid];
      o[4 * j] = f_own[0] * o[4 * j] + f_peer[0] * x.x;
      o[4 * j + 1] = f_own[0] * o[4 * j + 1] + f_peer[0] * x.y;
      o[4 * j + 2] = f_own[1] * o[4 * j + 2] + f_peer[1] * x.z;
      o[4 * j + 3] = f_own[1] * o[4 * j + 3] + f_peer[1] * x.w;
    }
    if (direct) {
      norm0 = l_run[0] > 0.0f ? 1.0f / l_run[0] : 0.0f;
      norm1 = l_run[1] > 0.0f ? 1.0f / l_run[1] : 0.0f;
    }
    writes_ml = rank == 0;
  } else if (direct) {
    __syncthreads();  // warpgroup 1 has read the last tile's alpha
    if (wg == 0 && c == 0) {
      // A token that sees no position (a rank of a sharded cache, mla_attend_latent) gets o = 0.
      alpha_s[r0] = l_run[0] > 0.0f ? 1.0f / l_run[0] : 0.0f;
      alpha_s[r1] = l_run[1] > 0.0f ? 1.0f / l_run[1] : 0.0f;
    }
    __syncthreads();
    norm0 = alpha_s[r0];
    norm1 = alpha_s[r1];
  }
  const int64_t slot0 = (static_cast<int64_t>(part) * tokens + t) * heads + h0;
  float* dst0 = o_part + (slot0 + r0) * kLat + 256 * wg + 2 * c;
  float* dst1 = o_part + (slot0 + r1) * kLat + 256 * wg + 2 * c;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    *reinterpret_cast<float2*>(dst0 + 8 * j) = make_float2(o[4 * j] * norm0, o[4 * j + 1] * norm0);
    *reinterpret_cast<float2*>(dst1 + 8 * j) = make_float2(o[4 * j + 2] * norm1, o[4 * j + 3] * norm1);
  }
  if (writes_ml && c == 0) {
    ml_part[2 * (slot0 + r0)] = m_run[0];
    ml_part[2 * (slot0 + r0) + 1] = l_run[0];
    ml_part[2 * (slot0 + r1)] = m_run[1];
    ml_part[2 * (slot0 + r1) + 1] = l_run[1];
  }
#else
  // Built for an architecture without wgmma: the host never selects this kernel there
  // (mla_attend_wgmma_supported + the device check), so reaching it is a bug.
  __trap();
#endif
}

}  // namespace

bool mla_attend_wgmma_supported(int64_t latent, int64_t rope, int64_t heads) {
  return latent == kLat && rope == kRope && heads > 0 && heads % kHeads == 0;
}

int64_t mla_wgmma_smem_bytes() { return kSmemBytes; }

namespace {

// A 2-D tensor map over the cache as rows of kEntry bf16 (one row a position of a page), boxes of
// 64 rows x 64 columns with the 128-byte swizzle of wgmma_primitives.cuh. False if it cannot be made.
bool encode_cache_map(CUtensorMap* map, const __nv_bfloat16* cache, int64_t rows) {
  if (rows <= 0) return false;
  return encode_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cache, kEntry, static_cast<uint64_t>(rows),
                              static_cast<uint64_t>(kEntry) * 2, kBlockCols, kTp, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

void launch_mla_attend_wgmma_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                                      const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache,
                                      int64_t cache_pages, int64_t page, int64_t splits, float scale, float* o_part,
                                      float* ml_part, bool early, bool pairs, cudaStream_t s) {
  (void)latent, (void)rope;  // checked by the caller (mla_attend_wgmma_supported)
  allow_dynamic_smem(attend_wgmma_kernel<true, false>, kSmemBytes);
  allow_dynamic_smem(attend_wgmma_kernel<false, false>, kSmemBytes);
  allow_dynamic_smem(attend_wgmma_kernel<true, true>, kSmemBytes);
  allow_dynamic_smem(attend_wgmma_kernel<false, true>, kSmemBytes);
  // TMA when every 64-position tile lies in one page (splits start at multiples of 64, so pages
  // of a multiple of 64 positions); the map cannot fail for a pool allocation (16-byte aligned),
  // but if it does the cp.async variant gives the same result.
  // Encoded once per cache extent: the driver call costs microseconds of host time, per layer and
  // step. A map encodes only the address and the extent, so a cache at a reused address gets the
  // same map.
  static std::mutex mu;
  static std::map<std::pair<const void*, int64_t>, std::pair<bool, CUtensorMap>> maps;
  CUtensorMap map{};
  bool tma = false;
  if (page % kTp == 0) {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, added] = maps.try_emplace({cache, cache_pages * page});
    if (added) {
      it->second.second = CUtensorMap{};
      it->second.first = encode_cache_map(&it->second.second, cache, cache_pages * page);
    }
    tma = it->second.first;
    map = it->second.second;
  }
  // With pairs, `splits` parts of two blocks each (clusters along x).
  const int per_part = pairs ? 2 : 1;
  dim3 grid(static_cast<unsigned>(splits * per_part), static_cast<unsigned>(tokens),
            static_cast<unsigned>(heads / kHeads));
  auto kernel = pairs ? (tma ? attend_wgmma_kernel<true, true> : attend_wgmma_kernel<false, true>)
                      : (tma ? attend_wgmma_kernel<true, false> : attend_wgmma_kernel<false, false>);
  launch_dependent_cluster(kernel, grid, kThreads, kSmemBytes, s, dim3(per_part, 1, 1), map, q_full,
                           static_cast<int>(heads), info, tables, cache, static_cast<int>(page), scale, o_part, ml_part,
                           early);
}

}  // namespace tessera::ops::cuda
