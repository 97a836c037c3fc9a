// MLA decode attention, "KV-major" on tensor cores (mma.sync m16n8k16 bf16 -> fp32: SM80-SM120).
// The cache positions are the MMA's M dimension and the block's heads (8 or 16) its N dimension:
//   Sᵀ[pos, head] = K[pos, :] · Qᵀ           (M = 32 positions a tile, K = latent + rope)
//   Oᵀ[l, head]  += Vᵀ[l, pos] · Pᵀ[pos, head] (M = latent, K = positions; V = the latent part of K)
// so 8 heads per GPU (Kimi-K2.5 at TP 8) fill the MMAs with no padding rows, where a heads-as-M
// kernel wastes half of every MMA. Tiles of 32 cache rows stream through a two-stage cp.async
// pipeline (the next tile loads while this one is computed); fragments come from shared memory
// with ldmatrix (.trans for Vᵀ). Online softmax in fp32 per head; q (pre-scaled) and p are rounded
// to bf16 for the MMAs. Partials per context split are merged by the combine kernel (attention.cu).
//
// fp8 e4m3 cache (FP8 = true): the pipeline moves the cache's bytes (half of bf16's) with cp.async
// into a two-stage staging buffer; each thread converts the bytes it copied into the one bf16 tile
// the MMAs read (exact: every e4m3 value is a bf16 value). The cache scale is folded into the
// query's pre-scale (S = (scale · kv_scale · q) · k8) and into the output partials (O = kv_scale ·
// P · V8), so the inner loops are the bf16 path's. Shared memory at 16 heads, 512 + 64: Q 18.3 KB +
// bf16 tile 36.5 KB + staging 2 x 18 KB + P, reductions 7.8 KB = 98.5 KB (bf16 path: two tiles,
// 99 KB), within the 99 KB a block may use on SM120.
//
// For batch 1 at long context, where a block's tiles arrive one DRAM round trip after another (a
// tile is requested only when the one before has landed; Nsight Compute: 1.9 TB/s at 32k context,
// docs/PERFORMANCE.md), two launch choices (MlaDecodeLaunch). (Two more were measured slower or no
// faster on an H100 and removed: an L2 prefetch some tiles ahead of the loads, and an instance with
// three block-wide barriers a tile instead of five.)
// - `early` (TESSERA_MLA_EARLY_KV, default on; a dependent launch, launch.cuh): the block looks up and starts
//   copying its first tiles' rows that earlier steps wrote (positions before its token's: a decode
//   step adds one row a sequence, at the token's position) before waiting for the kernel before it,
//   and reads q and the token's own row only after the wait.
// - `cluster` > 1 (TESSERA_MLA_DECODE_CLUSTERS, sm_90+; an experiment, off): consecutive splits merge
//   their partials in a cluster before the combine (reduce_cluster_partials).
#include <cooperative_groups.h>

#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels/attention/kv_fp8.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/ptx/mma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kTp = 32;  // cache positions per tile
constexpr int kPad = 8;  // bf16 padding per shared row: row strides become an odd number of 16-byte units

using namespace mma;

// Warps a block: 8 for the 512-wide latent, 4 for the 64-wide one (a warp owns whole 16-row
// tiles of Oᵀ). At 4 warps and two blocks an SM the 512-wide kernel was bound by instruction
// latency, not memory: 2 warps a scheduler, 0.2 instructions issued a cycle, 1.9 TB/s at batch 1
// and 32k context (Nsight Compute, H200); 8 warps halve each warp's chain of MMAs a tile.
template <int LAT>
__host__ __device__ constexpr int warps_for() {
  return LAT >= 512 ? 8 : 4;
}

template <int NH, int LAT, int ROPE, int STAGES, bool FP8 = false>
struct Layout {
  static constexpr int kWarps = warps_for<LAT>();
  static constexpr int kKGroups = kWarps / 2;  // Sᵀ: 2 halves of the tile's positions x kKGroups parts of K
  static constexpr int kThreadsPerRow = kWarps * 32 / kTp;  // cp.async: threads copying one cache row
  static constexpr int kEntry = LAT + ROPE;
  static constexpr int kStride = kEntry + kPad;     // Q and K rows
  static constexpr int kPStride = kTp + kPad;       // P rows ([head][pos])
  static constexpr int kKSteps = kEntry / 16;       // of Sᵀ
  static constexpr int kLatPerWarp = LAT / kWarps;  // Oᵀ rows owned by each warp
  static constexpr int kMTiles = kLatPerWarp / 16;
  static constexpr int kNTiles = NH / 8;
  static constexpr size_t kQBytes = NH * kStride * 2;
  // bf16: STAGES tiles the cp.async pipeline fills and the MMAs read; fp8: one bf16 tile the MMAs
  // read, filled by conversion from STAGES staging tiles of unpadded fp8 rows (cp.async targets).
  static constexpr size_t kKBytes = (FP8 ? 1 : STAGES) * kTp * kStride * 2;
  static constexpr size_t kStageBytes = FP8 ? STAGES * kTp * kEntry : 0;
  static constexpr size_t kPBytes = NH * kPStride * 2;
  static constexpr size_t kSredBytes = (kKGroups - 1) * 2 * 16 * NH * 4;  // Sᵀ partials of K parts 1..
  static constexpr size_t kStatBytes = (2 * 2 * NH + 4 * NH) * 4;  // col max/sum of warps 0,1; m, l, alpha, spare
  static constexpr size_t kSmem = kQBytes + kKBytes + kStageBytes + kPBytes + kSredBytes + kStatBytes;
  static_assert(LAT % (16 * kWarps) == 0 && ROPE % 16 == 0, "latent must split into 16-row tiles over the warps");
  static_assert(kKSteps >= kKGroups && kTp * kThreadsPerRow == kWarps * 32, "K parts and tile rows to share out");
  static_assert(kEntry % 16 == 0 && kStageBytes % 16 == 0, "fp8 rows must be whole 16-byte pieces");
  static_assert(kKBytes >= NH * LAT * 4 && kSredBytes >= (8 + 2) * NH * 4,
                "clusters (reduce_cluster_partials): Oᵀ over the tiles, 8 blocks' factors over the Sᵀ partials");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// TESSERA_MLA_DECODE_CLUSTERS: the `cluster` blocks of consecutive context splits of one (token,
// head group) form a cluster along x, and merge their partials through distributed shared memory
// into one partial, `part` = split / cluster of gridDim.x / cluster; with one part it is the
// normalised output (as a single split's is), so no combine runs. Each block first puts its Oᵀ
// ([NH][LAT] fp32, times `o_scale`) over its free tile buffers (`o_smem`) (its final running maxima
// are in m_s); threads < NH of each block then take every block's m and l for the merge
// factors (in `factors`, the free Sᵀ partials), and block `rank` merges latent columns [rank,
// rank + 1) x LAT / cluster of every head. A cluster barrier before (the partials are complete
// and visible) and after (no block leaves while another reads its shared memory).
template <int NH, int LAT>
__device__ void reduce_cluster_partials(const float (&o)[LAT / 16 / warps_for<LAT>()][NH / 8][4], unsigned char* o_smem,
                                        float* factors, const float* m_s, const float* l_s, float o_scale, int cluster,
                                        int heads, int h0, int t, int tokens, float* __restrict__ o_part,
                                        float* __restrict__ ml_part) {
  namespace cg = cooperative_groups;
  constexpr int kWarps = warps_for<LAT>(), kLatPerWarp = LAT / kWarps, kMTiles = kLatPerWarp / 16, kNTiles = NH / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank()), part = static_cast<int>(blockIdx.x) / cluster;
  const int parts = static_cast<int>(gridDim.x) / cluster;
  float* o_s = reinterpret_cast<float*>(o_smem);
  mma::cp_async_wait<0>();  // the pipeline's last copies (zero fills past the end) have landed
  __syncthreads();          // every warp is done with the last tile; m and l are final
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float* row = o_s + (8 * nt + 2 * c + e) * LAT + warp * kLatPerWarp;
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        row[16 * mi + g] = o[mi][nt][e] * o_scale;
        row[16 * mi + g + 8] = o[mi][nt][2 + e] * o_scale;
      }
    }
  cl.sync();
  // factors: [cluster][NH] merge factors, then M [NH] and the merged l [NH].
  if (threadIdx.x < NH) {
    const int h = threadIdx.x;
    float M = -FLT_MAX;
    for (int k = 0; k < cluster; ++k) M = fmaxf(M, cl.map_shared_rank(m_s, k)[h]);
    float l = 0.0f;
    for (int k = 0; k < cluster; ++k) {
      const float f = __expf(cl.map_shared_rank(m_s, k)[h] - M);
      factors[k * NH + h] = f;
      l += f * cl.map_shared_rank(l_s, k)[h];
    }
    factors[cluster * NH + h] = M;
    factors[cluster * NH + NH + h] = l;
  }
  __syncthreads();
  const int cols = LAT / cluster, col0 = rank * cols;
  for (int i = threadIdx.x; i < NH * cols; i += blockDim.x) {
    const int h = i / cols, col = col0 + i % cols;
    if (h0 + h >= heads) continue;
    float acc = 0.0f;
    for (int k = 0; k < cluster; ++k) acc += factors[k * NH + h] * cl.map_shared_rank(o_s, k)[h * LAT + col];
    // One part: the output itself, normalised (a token that sees no position, l = 0, gets o = 0).
    const float l = factors[cluster * NH + NH + h];
    const float scale = parts == 1 ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
    o_part[((static_cast<int64_t>(part) * tokens + t) * heads + h0 + h) * LAT + col] = acc * scale;
  }
  if (rank == 0 && threadIdx.x < NH && h0 + static_cast<int>(threadIdx.x) < heads) {
    const int64_t slot = (static_cast<int64_t>(part) * tokens + t) * heads + h0 + threadIdx.x;
    ml_part[2 * slot] = factors[cluster * NH + threadIdx.x];
    ml_part[2 * slot + 1] = factors[cluster * NH + NH + threadIdx.x];
  }
  cl.sync();
}
#endif

// CacheT: __nv_bfloat16 (FP8 false), or uint8_t holding e4m3 values q · kv_scale (FP8 true).
template <int NH, int LAT, int ROPE, int STAGES, bool FP8, class CacheT>
__global__ void __launch_bounds__(warps_for<LAT>() * 32, 2)
    attend_kv_major_kernel(const float* __restrict__ q_full, int heads, const TokenInfo* __restrict__ info,
                           const int32_t* __restrict__ tables, const CacheT* __restrict__ cache, int page, float scale,
                           float kv_scale, float* __restrict__ o_part, float* __restrict__ ml_part, bool early,
                           int cluster) {
  using L = Layout<NH, LAT, ROPE, STAGES, FP8>;
  constexpr int E = L::kEntry, S = L::kStride, PS = L::kPStride, kWarps = L::kWarps, kTpr = L::kThreadsPerRow;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);                             // [NH][S]
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kQBytes);                // [STAGES or 1][kTp][S]
  uint8_t* stage_bytes = smem_raw + L::kQBytes + L::kKBytes;                                  // fp8: [STAGES][kTp][E]
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(stage_bytes + L::kStageBytes);         // [NH][PS]
  float* sred = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(ps) + L::kPBytes);  // [KG-1][2][16][NH]
  float* colmax = sred + (L::kKGroups - 1) * 2 * 16 * NH;                                     // [2][NH]
  float* colsum = colmax + 2 * NH;                                                            // [2][NH]
  float* m_s = colsum + 2 * NH;                                                               // [NH]
  float* l_s = m_s + NH;
  float* alpha_s = l_s + NH;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int split = blockIdx.x, t = blockIdx.y, h0 = blockIdx.z * NH;
  const int tokens = gridDim.y;
  const TokenInfo ti = info[t];
  const MlaSplitRange range = mla_split_range(ti.pos, split, gridDim.x, kTp);
  const int begin = range.begin, end = range.end, ntiles = range.ntiles;

  // Each thread copies one cache row of every tile (kTpr threads a row), so the page-table lookup
  // is one load per thread per tile, done a tile ahead: a lookup per 16-byte piece would put a
  // dependent L2 round trip in front of every copy.
  constexpr int kPerPiece = 16 / static_cast<int>(sizeof(CacheT));  // elements per 16-byte piece
  constexpr int kChunks = E / kPerPiece;                            // 16-byte pieces per row
  const int my_row = threadIdx.x / kTpr, my_sub = threadIdx.x % kTpr;
  auto row_source = [&](int tile) -> const CacheT* {
    const int pos = begin + tile * kTp + my_row;
    if (tile >= ntiles || pos >= end) return nullptr;
    return cache + (static_cast<int64_t>(tables[ti.table_offset + pos / page]) * page + pos % page) * E;
  };
  auto copy_row = [&](const CacheT* src, int stage) {
    // bf16: straight into the MMA tile of this stage; fp8: into this stage's staging row.
    CacheT* dst;
    if constexpr (FP8)
      dst = stage_bytes + (stage * kTp + my_row) * E;
    else
      dst = ks + (stage * kTp + my_row) * S;
    // Rows past the end are zero-filled: their probability is 0, and 0 x stale data could be NaN.
    for (int v = my_sub; v < kChunks; v += kTpr)
      cp_async16(dst + v * kPerPiece, src ? src + v * kPerPiece : cache, src != nullptr);
  };
  auto load_tile = [&](const CacheT* src, int stage) {
    copy_row(src, stage);
    cp_async_commit();
  };
  // Prologue: tiles 0 .. STAGES-2 in flight (a group is committed even when empty, so that the
  // wait below always counts the same number of groups). With `early`, the rows earlier steps
  // wrote are copied before the wait for the kernel before this one (which may still be writing
  // this step's row and q), the others after it. (The first group then holds every early copy:
  // the prologue's first wait may wait for more than its tile, never for less.)
  const CacheT* first_src[STAGES > 1 ? STAGES - 1 : 1];
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) first_src[st] = row_source(st);
  auto written_before = [&](int st) { return begin + st * kTp + my_row < ti.pos; };
  if (early) {
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st)
      if (written_before(st)) copy_row(first_src[st], st);
  }
  // (Without releasing the combine: its blocks, scheduled early, took the slots of this grid's
  // second wave: 4.4 -> 8.4 µs a layer at batch 1, 8 heads x 32k, H100.)
  if (early) pdl_wait(/*release_dependents=*/false);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (!early || !written_before(st)) copy_row(first_src[st], st);
    cp_async_commit();
  }
  const CacheT* next_src = row_source(STAGES - 1);

  // fp8: the cache scale multiplies every score, so it joins the softmax scale in q.
  const float q_scale = FP8 ? scale * kv_scale : scale;
  // Q rows (pre-scaled), zero for heads past the end; softmax state. The loop has a compile-time
  // trip count so that all of a thread's loads are in flight together (a load-use loop would pay a
  // memory latency per element, tens of microseconds per block).
  {
    constexpr int kVecs = NH * E / 4, kIters = (kVecs + kWarps * 32 - 1) / (kWarps * 32);
    const float4* q4 = reinterpret_cast<const float4*>(q_full + (static_cast<int64_t>(t) * heads + h0) * E);
    float4 v[kIters];
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int idx = threadIdx.x + j * kWarps * 32;
      v[j] = idx < kVecs && h0 + idx / (E / 4) < heads ? q4[idx] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int idx = threadIdx.x + j * kWarps * 32;
      if (idx >= kVecs) continue;
      const int r = idx / (E / 4), i = (idx % (E / 4)) * 4;
      __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(qs + r * S + i);
      dst[0] = __floats2bfloat162_rn(v[j].x * q_scale, v[j].y * q_scale);
      dst[1] = __floats2bfloat162_rn(v[j].z * q_scale, v[j].w * q_scale);
    }
  }
  if (threadIdx.x < NH) {
    m_s[threadIdx.x] = -FLT_MAX;
    l_s[threadIdx.x] = 0.0f;
  }

  float o[L::kMTiles][L::kNTiles][4];
#pragma unroll
  for (int mi = 0; mi < L::kMTiles; ++mi)
#pragma unroll
    for (int nt = 0; nt < L::kNTiles; ++nt) o[mi][nt][0] = o[mi][nt][1] = o[mi][nt][2] = o[mi][nt][3] = 0.0f;

  // Sᵀ: positions [16 mt, 16 mt + 16), K steps [ks_begin, ks_end) (part kg of kKGroups).
  const int mt = warp & 1, kg = warp >> 1;
  const int ks_begin = kg * L::kKSteps / L::kKGroups, ks_end = (kg + 1) * L::kKSteps / L::kKGroups;

  for (int tile = 0; tile < ntiles; ++tile) {
    const int stage = tile % STAGES;
    cp_async_wait<STAGES - 2>();  // tile `tile` has landed (for this thread's copies)
    __syncthreads();              // ... for every thread's; and every warp is done with tile - 1
    // Refill the stage tile - 1 used with tile + STAGES - 1.
    load_tile(next_src, (tile + STAGES - 1) % STAGES);
    next_src = row_source(tile + STAGES);
    const __nv_bfloat16* kt = ks + (FP8 ? 0 : stage) * kTp * S;
    if constexpr (FP8) {
      // Each thread converts the pieces it copied (its own cp.async writes are visible to it after
      // the wait); the barrier above means every warp is done reading the previous tile.
      const uint8_t* src = stage_bytes + (stage * kTp + my_row) * E;
      __nv_bfloat16* dst = ks + my_row * S;
      for (int v = my_sub; v < kChunks; v += kTpr) {
        uint4 lo, hi;
        kvfp8::decode16_bf16(*reinterpret_cast<const uint4*>(src + 16 * v), lo, hi);
        *reinterpret_cast<uint4*>(dst + 16 * v) = lo;
        *reinterpret_cast<uint4*>(dst + 16 * v + 8) = hi;
      }
      __syncthreads();  // the bf16 tile is complete
    }
    const int n = min(kTp, end - (begin + tile * kTp));

    // Sᵀ partial over this warp's half of the K steps.
    float s[L::kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < L::kNTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    {
      const int j = lane >> 3, r = lane & 7;
      const __nv_bfloat16* a_base = kt + (16 * mt + (j & 1) * 8 + r) * S + (j >> 1) * 8;
      const __nv_bfloat16* b_base = qs + r * S + (j & 1) * 8;
      for (int k = ks_begin; k < ks_end; ++k) {
        uint32_t a[4];
        ldmatrix_x4(a, a_base + 16 * k);
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt) {
          uint32_t b0, b1;
          ldmatrix_x2(b0, b1, b_base + nt * 8 * S + 16 * k);
          mma_bf16(s[nt], a, b0, b1);
        }
      }
    }
    if (kg != 0) {
      float* part = sred + (kg - 1) * 2 * 16 * NH;
#pragma unroll
      for (int nt = 0; nt < L::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[((mt * 32 + lane) * L::kNTiles + nt) * 4 + e] = s[nt][e];
    }
    __syncthreads();
    if (kg == 0) {
      // Full Sᵀ for positions 16 mt + g (+8), heads 8 nt + 2c (+1); mask rows past the tile's end.
      float mx[L::kNTiles][2];
#pragma unroll
      for (int nt = 0; nt < L::kNTiles; ++nt) {
#pragma unroll
        for (int part = 0; part < L::kKGroups - 1; ++part)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] += sred[(part * 2 * 32 + mt * 32 + lane) * L::kNTiles * 4 + nt * 4 + e];
        if (16 * mt + g >= n) s[nt][0] = s[nt][1] = -FLT_MAX;
        if (16 * mt + g + 8 >= n) s[nt][2] = s[nt][3] = -FLT_MAX;
        mx[nt][0] = fmaxf(s[nt][0], s[nt][2]);
        mx[nt][1] = fmaxf(s[nt][1], s[nt][3]);
      }
      // Column (head) maxima over the warp's 16 positions: lanes with the same c hold one head pair.
#pragma unroll
      for (int off = 4; off < 32; off <<= 1)
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt) {
          mx[nt][0] = fmaxf(mx[nt][0], __shfl_xor_sync(0xffffffffu, mx[nt][0], off));
          mx[nt][1] = fmaxf(mx[nt][1], __shfl_xor_sync(0xffffffffu, mx[nt][1], off));
        }
      if (g == 0)
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt) {
          colmax[mt * NH + 8 * nt + 2 * c] = mx[nt][0];
          colmax[mt * NH + 8 * nt + 2 * c + 1] = mx[nt][1];
        }
    }
    __syncthreads();
    if (threadIdx.x < NH) {
      const int h = threadIdx.x;
      const float m_new = fmaxf(m_s[h], fmaxf(colmax[h], colmax[NH + h]));
      alpha_s[h] = __expf(m_s[h] - m_new);
      m_s[h] = m_new;
    }
    __syncthreads();
    if (kg == 0) {
      float sum[L::kNTiles][2];
#pragma unroll
      for (int nt = 0; nt < L::kNTiles; ++nt) {
        const int hh = 8 * nt + 2 * c;
        const float m0 = m_s[hh], m1 = m_s[hh + 1];
        const float p0 = __expf(s[nt][0] - m0), p1 = __expf(s[nt][1] - m1);
        const float p2 = __expf(s[nt][2] - m0), p3 = __expf(s[nt][3] - m1);
        const int pos = 16 * mt + g;
        ps[hh * PS + pos] = __float2bfloat16_rn(p0);
        ps[(hh + 1) * PS + pos] = __float2bfloat16_rn(p1);
        ps[hh * PS + pos + 8] = __float2bfloat16_rn(p2);
        ps[(hh + 1) * PS + pos + 8] = __float2bfloat16_rn(p3);
        sum[nt][0] = p0 + p2;
        sum[nt][1] = p1 + p3;
      }
#pragma unroll
      for (int off = 4; off < 32; off <<= 1)
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt) {
          sum[nt][0] += __shfl_xor_sync(0xffffffffu, sum[nt][0], off);
          sum[nt][1] += __shfl_xor_sync(0xffffffffu, sum[nt][1], off);
        }
      if (g == 0)
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt) {
          colsum[mt * NH + 8 * nt + 2 * c] = sum[nt][0];
          colsum[mt * NH + 8 * nt + 2 * c + 1] = sum[nt][1];
        }
    }
    __syncthreads();  // P and the column sums are complete
    if (threadIdx.x < NH) {
      const int h = threadIdx.x;
      l_s[h] = l_s[h] * alpha_s[h] + colsum[h] + colsum[NH + h];
    }
    // Oᵀ = alpha · Oᵀ + Vᵀ · Pᵀ over this warp's latent rows.
#pragma unroll
    for (int nt = 0; nt < L::kNTiles; ++nt) {
      const float a0 = alpha_s[8 * nt + 2 * c], a1 = alpha_s[8 * nt + 2 * c + 1];
#pragma unroll
      for (int mi = 0; mi < L::kMTiles; ++mi) {
        o[mi][nt][0] *= a0;
        o[mi][nt][1] *= a1;
        o[mi][nt][2] *= a0;
        o[mi][nt][3] *= a1;
      }
    }
    {
      const int j = lane >> 3, r = lane & 7;
#pragma unroll
      for (int kk = 0; kk < kTp / 16; ++kk) {
        uint32_t b[L::kNTiles][2];
#pragma unroll
        for (int nt = 0; nt < L::kNTiles; ++nt)
          ldmatrix_x2(b[nt][0], b[nt][1], ps + (8 * nt + r) * PS + 16 * kk + (j & 1) * 8);
        const __nv_bfloat16* v_base = kt + (16 * kk + (j >> 1) * 8 + r) * S + warp * L::kLatPerWarp + (j & 1) * 8;
#pragma unroll
        for (int mi = 0; mi < L::kMTiles; ++mi) {
          uint32_t a[4];
          ldmatrix_x4_trans(a, v_base + 16 * mi);
#pragma unroll
          for (int nt = 0; nt < L::kNTiles; ++nt) mma_bf16(o[mi][nt], a, b[nt][0], b[nt][1]);
        }
      }
    }
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (cluster > 1) {
    reduce_cluster_partials<NH, LAT>(o, smem_raw + L::kQBytes, sred, m_s, l_s, FP8 ? kv_scale : 1.0f, cluster, heads,
                                     h0, t, tokens, o_part, ml_part);
    return;
  }
#endif
  // Partials: Oᵀ unnormalised (fp8: times the cache scale, the values being q · kv_scale), m and l
  // per head. With one split (large batches) `o_part` is the output [t, h, LAT] itself and Oᵀ is
  // normalised here, so that no combine kernel runs.
  const bool direct = gridDim.x == 1;
  if (direct) __syncthreads();  // l_s of the last tile is complete
#pragma unroll
  for (int nt = 0; nt < L::kNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = h0 + 8 * nt + 2 * c + e;
      if (h >= heads) continue;
      // (A token that sees no position, l = 0, gets o = 0: a rank of a sharded cache, mla_attend_latent.)
      const float l = l_s[h - h0];
      const float o_scale = (FP8 ? kv_scale : 1.0f) * (direct ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f);
      float* dst = o_part + ((static_cast<int64_t>(split) * tokens + t) * heads + h) * LAT + warp * L::kLatPerWarp;
#pragma unroll
      for (int mi = 0; mi < L::kMTiles; ++mi) {
        dst[16 * mi + g] = o[mi][nt][e] * o_scale;
        dst[16 * mi + g + 8] = o[mi][nt][2 + e] * o_scale;
      }
    }
  if (threadIdx.x < NH && h0 + static_cast<int>(threadIdx.x) < heads) {
    const int64_t slot = (static_cast<int64_t>(split) * tokens + t) * heads + h0 + threadIdx.x;
    ml_part[2 * slot] = m_s[threadIdx.x];
    ml_part[2 * slot + 1] = l_s[threadIdx.x];
  }
}

// Two stages, two blocks an SM (~86-95 KB each, which SM120's 99 KB also holds): measured faster on
// the H200 than four stages with one block an SM (docs/PERFORMANCE.md); the pipeline depth stays a
// template parameter for such comparisons.
constexpr int kStages = 2;

template <int NH, int LAT, int ROPE, bool FP8, class CacheT, int STAGES = kStages>
void launch(int64_t tokens, int64_t heads, const float* q_full, const TokenInfo* info, const int32_t* tables,
            const CacheT* cache, int64_t page, int64_t splits, float scale, float kv_scale, float* o_part,
            float* ml_part, const MlaDecodeLaunch& how, cudaStream_t s) {
  using L = Layout<NH, LAT, ROPE, STAGES, FP8>;
  auto kernel = attend_kv_major_kernel<NH, LAT, ROPE, STAGES, FP8, CacheT>;
  allow_dynamic_smem(kernel, static_cast<int>(L::kSmem));
  dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(tokens), static_cast<unsigned>((heads + NH - 1) / NH));
  const dim3 cluster(static_cast<unsigned>(std::max(1, how.cluster)), 1, 1);
  if (how.early)
    launch_dependent_cluster(kernel, grid, L::kWarps * 32, L::kSmem, s, cluster, q_full, static_cast<int>(heads), info,
                             tables, cache, static_cast<int>(page), scale, kv_scale, o_part, ml_part, true,
                             how.cluster);
  else
    launch_cluster(kernel, grid, L::kWarps * 32, L::kSmem, s, cluster, q_full, static_cast<int>(heads), info, tables,
                   cache, static_cast<int>(page), scale, kv_scale, o_part, ml_part, false, how.cluster);
}

template <int LAT, int ROPE, bool FP8, class CacheT>
void launch_heads(int64_t tokens, int64_t heads, const float* q_full, const TokenInfo* info, const int32_t* tables,
                  const CacheT* cache, int64_t page, int64_t splits, float scale, float kv_scale, float* o_part,
                  float* ml_part, const MlaDecodeLaunch& how, cudaStream_t s) {
  (heads <= 8 ? launch<8, LAT, ROPE, FP8, CacheT>
              : launch<16, LAT, ROPE, FP8, CacheT>)(tokens, heads, q_full, info, tables, cache, page, splits, scale,
                                                    kv_scale, o_part, ml_part, how, s);
}

}  // namespace

bool mla_attend_kv_major_supported(int64_t latent, int64_t rope) {
  return (latent == 512 && rope == 64) || (latent == 64 && rope == 16);
}

// What the GPU must offer for the kernel to run.
int64_t mla_kv_major_smem_bytes(int64_t heads, int64_t latent, int64_t rope, bool fp8) {
  const bool small = heads <= 8;
  if (latent == 512 && rope == 64) {
    if (fp8) return small ? Layout<8, 512, 64, kStages, true>::kSmem : Layout<16, 512, 64, kStages, true>::kSmem;
    return small ? Layout<8, 512, 64, kStages>::kSmem : Layout<16, 512, 64, kStages>::kSmem;
  }
  if (fp8) return small ? Layout<8, 64, 16, kStages, true>::kSmem : Layout<16, 64, 16, kStages, true>::kSmem;
  return small ? Layout<8, 64, 16, kStages>::kSmem : Layout<16, 64, 16, kStages>::kSmem;
}
// SM120 allows 99 KB a block: every instance must fit.
static_assert(Layout<16, 512, 64, kStages>::kSmem <= 99 * 1024 &&
                  Layout<16, 512, 64, kStages, true>::kSmem <= 99 * 1024,
              "the KV-major kernel must fit SM120's shared memory");

void launch_mla_attend_kv_major_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent,
                                         int64_t rope, const TokenInfo* info, const int32_t* tables,
                                         const KvCacheArg& cache, int64_t page, int64_t splits, float scale,
                                         float* o_part, float* ml_part, const MlaDecodeLaunch& how, cudaStream_t s) {
  const bool wide = latent == 512 && rope == 64;
  if (cache.fp8) {
    (wide ? launch_heads<512, 64, true, uint8_t>
          : launch_heads<64, 16, true, uint8_t>)(tokens, heads, q_full, info, tables, cache.bytes(), page, splits,
                                                 scale, cache.scale, o_part, ml_part, how, s);
  } else {
    (wide ? launch_heads<512, 64, false, __nv_bfloat16>
          : launch_heads<64, 16, false, __nv_bfloat16>)(tokens, heads, q_full, info, tables, cache.bf16(), page, splits,
                                                        scale, 1.0f, o_part, ml_part, how, s);
  }
}

}  // namespace tessera::ops::cuda
