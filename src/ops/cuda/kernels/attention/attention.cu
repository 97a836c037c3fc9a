// MLA attention kernels (spec §4): the query is absorbed into the latent space (q_nope · W_UK),
// attention runs as multi-query attention over the bf16 latent cache [c_kv | k_pe] with the latent
// itself as the value, then W_UV maps the result back to per-head values. The same absorbed path
// serves prefill and decode in this first version.
#include <algorithm>
#include <cfloat>

#include "ops/cuda/kernels/attention/kv_fp8.cuh"
#include "ops/cuda/kernels/attention/kv_store.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

// Each new token's latent into its cache slot: bf16, or fp8 e4m3 stored as sat_e4m3_rne(x / scale).
template <class CacheT>
__global__ void kv_cache_write_kernel(const float* latent, int64_t entry, const TokenInfo* info, const int32_t* tables,
                                      CacheT* cache, int64_t page, float scale) {
  pdl_wait();  // first: launched with launch_dependent
  const int64_t t = blockIdx.x;
  const int64_t slot = kv_slot_offset(info, tables, t, page, entry);
  if (slot < 0) return;  // another rank stores it
  CacheT* dst = cache + slot;
  for (int64_t i = threadIdx.x; i < entry; i += blockDim.x) store_kv(dst + i, latent[t * entry + i], scale);
}

// One block per (token, head); threads stride over the latent dimension, so W_UK rows are read
// coalesced.
__global__ void absorb_q_kernel(const float* q, int64_t heads, int64_t nope, int64_t rope, const __nv_bfloat16* kv_b,
                                int64_t v, int64_t latent, float* q_full) {
  extern __shared__ float q_nope[];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const float* qh = q + (t * heads + h) * (nope + rope);
  for (int64_t d = threadIdx.x; d < nope; d += blockDim.x) q_nope[d] = qh[d];
  __syncthreads();
  const __nv_bfloat16* w_uk = kv_b + h * (nope + v) * latent;
  float* out = q_full + (t * heads + h) * (latent + rope);
  for (int64_t l = threadIdx.x; l < latent; l += blockDim.x) {
    float acc = 0.0f;
    for (int64_t d = 0; d < nope; ++d) acc += q_nope[d] * __bfloat162float(w_uk[d * latent + l]);
    out[l] = acc;
  }
  for (int64_t r = threadIdx.x; r < rope; r += blockDim.x) out[latent + r] = qh[nope + r];
}

constexpr int kTile = 32;              // cache positions per shared-memory tile (one per lane)
constexpr int kMaxHeadsPerBlock = 8;   // one warp per head; a tile is loaded once for all of them
constexpr int kMaxLatentPerLane = 16;  // latent <= 512

// Cache row `row` (entry elements) -> fp32 `dst` (shared memory), with 16-byte loads where the
// entry allows. bf16: 8 elements a load. fp8: 16 a load, each q · kv_scale (fp32 product, as the
// CPU reference reads it).
__device__ inline void load_row_f32(const __nv_bfloat16* cache, int64_t row, int entry, float /*kv_scale*/, float* dst,
                                    int lane) {
  if (entry % 8 != 0) {
    for (int i = lane; i < entry; i += 32) dst[i] = __bfloat162float(cache[row * entry + i]);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(cache + row * entry);
  for (int v = lane; v < entry / 8; v += 32) {
    const uint4 raw = src[v];
    const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(pair[k]);
      dst[v * 8 + 2 * k] = f.x;
      dst[v * 8 + 2 * k + 1] = f.y;
    }
  }
}
__device__ inline void load_row_f32(const uint8_t* cache, int64_t row, int entry, float kv_scale, float* dst,
                                    int lane) {
  if (entry % 16 != 0) {
    for (int i = lane; i < entry; i += 32) dst[i] = kvfp8::decode2(cache[row * entry + i]).x * kv_scale;
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(cache + row * entry);
  for (int v = lane; v < entry / 16; v += 32) {
    const uint4 raw = src[v];
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = kvfp8::decode2(static_cast<uint16_t>(w[k] & 0xffffu));
      const float2 b = kvfp8::decode2(static_cast<uint16_t>(w[k] >> 16));
      dst[v * 16 + 4 * k] = a.x * kv_scale;
      dst[v * 16 + 4 * k + 1] = a.y * kv_scale;
      dst[v * 16 + 4 * k + 2] = b.x * kv_scale;
      dst[v * 16 + 4 * k + 3] = b.y * kv_scale;
    }
  }
}

// One block per (split of the context, token, group of heads). Each tile of 32 cache rows is
// loaded once (16-byte loads, one page lookup per row) and shared by the block's heads; lane p
// scores position p; the output accumulates per lane over latent dims lane, lane + 32, ... with an
// online softmax. Each split writes its unnormalised partial (o, max, sum) for the combine kernel.
// CacheT: __nv_bfloat16, or uint8_t for an fp8 e4m3 cache read as q · kv_scale.
template <class CacheT>
__global__ void attend_kernel(const float* q_full, int heads, int heads_per_block, int latent, int rope,
                              const TokenInfo* info, const int32_t* tables, const CacheT* cache, int page, float scale,
                              float kv_scale, float* o_part, float* ml_part) {
  extern __shared__ float smem[];
  const int entry = latent + rope;
  const int row_stride = entry + 1;       // +1 float: lanes reading different rows hit different banks
  float* tile = smem;                     // [kTile, row_stride]
  float* qs = smem + kTile * row_stride;  // [heads_per_block, entry]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int split = blockIdx.x, t = blockIdx.y, h = blockIdx.z * heads_per_block + warp;
  const int tokens = gridDim.y;
  const bool active = warp < heads_per_block && h < heads;
  const TokenInfo ti = info[t];
  const MlaSplitRange range = mla_split_range(ti.pos, split, gridDim.x, kTile);
  const int begin = range.begin, end = range.end;
  if (active)
    for (int i = lane; i < entry; i += 32)
      qs[warp * entry + i] = q_full[(static_cast<int64_t>(t) * heads + h) * entry + i];
  float acc[kMaxLatentPerLane];
#pragma unroll
  for (int i = 0; i < kMaxLatentPerLane; ++i) acc[i] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int base = begin; base < end; base += kTile) {
    __syncthreads();
    const int n = min(kTile, end - base);
    for (int p = warp; p < n; p += warps) {
      const int pos = base + p;
      const int64_t row = static_cast<int64_t>(tables[ti.table_offset + pos / page]) * page + pos % page;
      load_row_f32(cache, row, entry, kv_scale, tile + p * row_stride, lane);
    }
    __syncthreads();
    if (!active) continue;
    float score = -FLT_MAX;
    if (lane < n) {
      const float* k = tile + lane * row_stride;
      const float* qh = qs + warp * entry;
      float s0 = 0.0f, s1 = 0.0f;
      int i = 0;
      for (; i + 1 < entry; i += 2) {
        s0 += qh[i] * k[i];
        s1 += qh[i + 1] * k[i + 1];
      }
      if (i < entry) s0 += qh[i] * k[i];
      score = (s0 + s1) * scale;
    }
    float tile_max = score;
    for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
    const float m_new = fmaxf(m, tile_max);
    const float p = lane < n ? __expf(score - m_new) : 0.0f;
    float p_sum = p;
    for (int o = 16; o > 0; o >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, o);
    const float alpha = __expf(m - m_new);
    l = l * alpha + p_sum;
    m = m_new;
#pragma unroll
    for (int i = 0; i < kMaxLatentPerLane; ++i) acc[i] *= alpha;
    for (int j = 0; j < n; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* k = tile + j * row_stride + lane;
#pragma unroll
      for (int i = 0; i < kMaxLatentPerLane; ++i)
        if (lane + 32 * i < latent) acc[i] += pj * k[32 * i];
    }
  }
  if (!active) return;
  const int64_t slot = (static_cast<int64_t>(split) * tokens + t) * heads + h;
#pragma unroll
  for (int i = 0; i < kMaxLatentPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < latent) o_part[slot * latent + d] = acc[i];
  }
  if (lane == 0) {
    ml_part[2 * slot] = m;
    ml_part[2 * slot + 1] = l;
  }
}

// Merges the splits' partials: o = Σ_s e^(m_s - M) o_s / Σ_s e^(m_s - M) l_s. A block covers
// kCols float4 output columns of one (token, head), its 128 threads as kCols columns x 128 / kCols
// groups of splits (group g sums splits g, g + groups, ...). kCols is 8 when the step has very few
// (token, head) pairs, so that a batch-1 step still has hundreds of blocks in flight (32 blocks for
// 8 heads read 4 MB of partials at 256 splits), 128 (a whole row) when it has thousands, else 32. The first batch of
// partial loads is issued before the split factors are known (they do not depend on them), and M and the denominator
// are warp reductions, not a loop on one thread behind block barriers (at 128 splits that loop was a third of this
// kernel's time).
constexpr int kCombineThreads = 128;
// kBatch: partial loads in flight per thread. 16 in the narrowest blocks (batch 1 at 8 or 16 heads:
// a thread's 16 splits of 256 in one L2 round trip instead of two; 4.5 -> 3.9 µs a layer in a step at
// 8 heads x 32k on an H100), 8 elsewhere (at 64 heads the 32-column blocks took 6.6 -> 7.6 µs with
// 16; whole rows, batch 128, need the registers for occupancy).
template <int kCols, int kBatch>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const float* o_part, const float* ml_part, int splits, int tokens, int heads, int latent,
                   float* o_lat, float* lse) {
  constexpr int kGroups = kCombineThreads / kCols;
  pdl_wait();                                                 // first: launched with launch_dependent
  __shared__ float f_s[kCombineThreads / 32][kMlaMaxSplits];  // a row per warp
  __shared__ float4 red[kGroups][kCols];
  const int t = blockIdx.x, h = blockIdx.y;
  auto slot = [&](int s) { return (static_cast<int64_t>(s) * tokens + t) * heads + h; };
  const bool vec = latent % 4 == 0;
  const int col = threadIdx.x % kCols, grp = threadIdx.x / kCols;
  const int d4 = static_cast<int>(blockIdx.z) * kCols + col;
  const bool active = vec && d4 < latent / 4;
  float4 v[kBatch];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int s = s0 + j * kGroups;
      v[j] = active && s < splits ? reinterpret_cast<const float4*>(o_part + slot(s) * latent)[d4]
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  load_batch(grp);
  // Split factors, computed by every warp for itself (no block barrier before the sums; a step at
  // batch 128 has 32768 of these blocks): lane i takes splits i, i + 32, ..., and the warp's
  // factors go to its own row of f_s.
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  auto ml_of = [&](int s) { return reinterpret_cast<const float2*>(ml_part)[slot(s)]; };
  // Unrolled to the most splits there can be and without branches, so that a lane's loads are all
  // in flight together (a loop over `splits` was unrolled by 4: two L2 round trips one after the
  // other at 256 splits); lanes past the last split read it again, which leaves the maximum as it is.
  constexpr int kPerLane = kMlaMaxSplits / 32;
  float M = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) M = fmaxf(M, ml_of(min(lane + 32 * j, splits - 1)).x);
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  float den = 0.0f;
  float* f_w = f_s[warp];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int s = lane + 32 * j;
    if (s >= splits) break;
    const float2 ml = ml_of(s);  // again, from L1: holding them in registers cost occupancy
    const float f = __expf(ml.x - M);
    f_w[s] = f;
    den += f * ml.y;
  }
  for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
  // A token that sees no position (den = 0: a rank of a sharded cache) gets o = 0, lse = -inf.
  const float inv = den > 0.0f ? 1.0f / den : 0.0f;
  if (lse && blockIdx.z == 0 && threadIdx.x == 0)
    lse[static_cast<int64_t>(t) * heads + h] = den > 0.0f ? M + logf(den) : -INFINITY;
  __syncwarp();  // f_w is complete for every lane of this warp
  float* dst = o_lat + (static_cast<int64_t>(t) * heads + h) * latent;
  if (vec) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = grp; s0 < splits; s0 += kGroups * kBatch) {
      if (s0 != grp) load_batch(s0);  // the first batch is in flight since the start
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j * kGroups;
        const float f = s < splits ? f_w[s] : 0.0f;
        acc.x += f * v[j].x;
        acc.y += f * v[j].y;
        acc.z += f * v[j].z;
        acc.w += f * v[j].w;
      }
    }
    red[grp][col] = acc;
    __syncthreads();
    if (grp == 0 && active) {
      float4 sum = red[0][col];
      for (int g = 1; g < kGroups; ++g) {
        sum.x += red[g][col].x;
        sum.y += red[g][col].y;
        sum.z += red[g][col].z;
        sum.w += red[g][col].w;
      }
      reinterpret_cast<float4*>(dst)[d4] = make_float4(sum.x * inv, sum.y * inv, sum.z * inv, sum.w * inv);
    }
    return;
  }
  // Latent not a multiple of 4 (test shapes): one column a thread.
  const int end = min(latent, static_cast<int>(blockIdx.z + 1) * kCols * 4);
  for (int d = static_cast<int>(blockIdx.z) * kCols * 4 + static_cast<int>(threadIdx.x); d < end;
       d += kCombineThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += f_w[s] * o_part[slot(s) * latent + d];
    dst[d] = acc * inv;
  }
}

// One block per (token, head); a warp per output row j of W_UV[h], lanes over the latent.
__global__ void up_v_kernel(const float* o_lat, int64_t o_lat_row, int64_t heads, int64_t latent,
                            const __nv_bfloat16* kv_b, int64_t nope, int64_t v, float* out) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* ol = o_lat + t * o_lat_row + h * latent;
  for (int64_t j = warp; j < v; j += warps) {
    const __nv_bfloat16* w = kv_b + (h * (nope + v) + nope + j) * latent;
    float acc = 0.0f;
    for (int64_t i = lane; i < latent; i += 32) acc += __bfloat162float(w[i]) * ol[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[t * heads * v + h * v + j] = acc;
  }
}

// lse[i] = m + log l of the single split's (m, l) (the kernels that normalise their own output with
// one split); -inf for a token that saw no position.
__global__ void lse_from_ml_kernel(const float* ml_part, int64_t n, float* lse) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float m = ml_part[2 * i], l = ml_part[2 * i + 1];
  lse[i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// o_lat[t, h, :] *= exp(lse[t, h] - log Σ_r exp(lse_all[t, r · heads + h])): one block a (t, h).
__global__ void rank_weigh_kernel(float* o_lat, const float* lse, const float* lse_all, int heads, int ranks,
                                  int latent) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const float* all = lse_all + t * ranks * heads + h;
  float m = -INFINITY;
  for (int r = 0; r < ranks; ++r) m = fmaxf(m, all[r * heads]);
  const float own = lse[t * heads + h];
  float f = 0.0f;
  if (own != -INFINITY) {
    float sum = 0.0f;
    for (int r = 0; r < ranks; ++r) sum += expf(all[r * heads] - m);
    f = expf(own - (m + logf(sum)));
  }
  float* o = o_lat + (t * heads + h) * latent;
  for (int i = static_cast<int>(threadIdx.x); i < latent; i += static_cast<int>(blockDim.x)) o[i] *= f;
}

}  // namespace

void launch_mla_lse_from_partials(const float* ml_part, int64_t tokens, int64_t heads, float* lse, cudaStream_t s) {
  const int64_t n = tokens * heads;
  if (n > 0) launch_plain(lse_from_ml_kernel, dim3(static_cast<unsigned>((n + 255) / 256)), 256, 0, s, ml_part, n, lse);
}

void launch_mla_rank_weigh(float* o_lat, const float* lse, const float* lse_all, int64_t tokens, int64_t heads,
                           int64_t ranks, int64_t latent, cudaStream_t s) {
  if (tokens > 0 && heads > 0)
    launch_plain(rank_weigh_kernel, dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(heads)), 128, 0, s, o_lat,
                 lse, lse_all, static_cast<int>(heads), static_cast<int>(ranks), static_cast<int>(latent));
}

void launch_kv_cache_write(const float* latent, int64_t tokens, int64_t entry, const TokenInfo* info,
                           const int32_t* tables, __nv_bfloat16* cache, int64_t page, cudaStream_t s) {
  if (tokens > 0)
    launch_dependent(kv_cache_write_kernel<__nv_bfloat16>, dim3(static_cast<unsigned>(tokens)), 128, 0, s, latent,
                     entry, info, tables, cache, page, 1.0f);
}

void launch_kv_cache_write_fp8(const float* latent, int64_t tokens, int64_t entry, const TokenInfo* info,
                               const int32_t* tables, uint8_t* cache, int64_t page, float scale, cudaStream_t s) {
  if (tokens > 0)
    launch_dependent(kv_cache_write_kernel<uint8_t>, dim3(static_cast<unsigned>(tokens)), 128, 0, s, latent, entry,
                     info, tables, cache, page, scale);
}

void launch_mla_absorb_q(const float* q, int64_t tokens, int64_t heads, int64_t nope, int64_t rope,
                         const __nv_bfloat16* kv_b, int64_t v, int64_t latent, float* q_full, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  launch_plain(absorb_q_kernel, grid, 128, nope * sizeof(float), s, q, heads, nope, rope, kv_b, v, latent, q_full);
}

int64_t mla_attend_splits(int64_t tokens, int64_t heads, int64_t max_visible, int num_sms, MlaKernel kernel,
                          bool wgmma_pairs) {
  // The mma.sync kernels take 16 heads a block and one or two blocks fit on an SM; the wgmma kernel
  // takes 64 heads and ~225 KB of shared memory, one block an SM. Pick the fewest context splits
  // (each adds partials for the combine kernel) whose blocks fill whole waves to 90% (a 1.5-wave
  // grid leaves a quarter of the GPU idle), else the best fill, with at least two tiles a split for
  // the mma.sync kernels. The wgmma kernel's partials are 128 KB a split (64 heads x 512 fp32), so
  // it takes up to 64 splits of one tile or more, and more only of at least eight tiles: at batch 1
  // (`tessera bench kernels --batch 1 --filter wgmma`, H200, µs with the combine) 32k context ran
  // 34.9 in 64 splits against 42.7 in 128 and 47.4 in 32; 8k 22.8 in 64 against 23.5 in 32, 30.8 in
  // 16 (what an eight-tile floor allowed) and 33.8 in 128; 1k 16.4 in 16 splits of one tile.
  // Only counts that
  // launch_mla_attend realises are candidates: it rounds each split up to whole tiles, so 63
  // splits of 8192 positions would run as 43 splits of 192 (27 us at batch 1 against 23 us for 64
  // splits of 128, `tessera bench kernels`).
  // With wgmma pairs a split (a part, as the combine sees it) is two blocks of half its positions
  // each, so the same counts of parts fill twice the SMs.
  const bool wgmma = kernel == MlaKernel::kWgmma;
  const int64_t per_part = wgmma && wgmma_pairs ? 2 : 1;
  const int64_t per_block = wgmma ? 64 : 16, per_sm = wgmma ? 1 : 2, tile = wgmma ? 2 * kTile : kTile;
  const int64_t groups = (heads + per_block - 1) / per_block, slots = per_sm * static_cast<int64_t>(num_sms);
  const int64_t base = std::max<int64_t>(1, tokens * groups);
  // Decided for a rounded-up context (8193 -> 9216), so that a recorded decode graph, which bakes
  // the count in, stays valid while the context grows within an eighth of an octave.
  int64_t octave = 1;  // the largest power of two <= max_visible
  while (octave * 2 <= max_visible) octave *= 2;
  const int64_t step = std::max<int64_t>(tile, octave / 8);
  const int64_t visible = (max_visible + step - 1) / step * step;
  const int64_t tiles = visible / tile / per_part;
  const int64_t most = wgmma ? std::max<int64_t>(std::min<int64_t>(64, tiles), tiles / 8) : tiles / 2;
  const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>(kMlaMaxSplits, most));
  int64_t best = 1;
  double best_fill = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const int64_t blocks_x = s * per_part;
    const int64_t chunk =
        mla_split_chunk(static_cast<int>(visible), static_cast<int>(blocks_x), static_cast<int>(tile));
    if ((visible + chunk - 1) / chunk != blocks_x) continue;  // runs as fewer splits
    const int64_t blocks = base * blocks_x, waves = (blocks + slots - 1) / slots;
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * slots);
    if (fill >= 0.9) return s;
    if (fill > best_fill + 0.02) {
      best = s;
      best_fill = fill;
    }
  }
  return best;
}

namespace {
template <class CacheT>
void launch_attend_cuda_core(dim3 grid, int heads_per_block, size_t smem, cudaStream_t s, const float* q_full,
                             int64_t heads, int64_t latent, int64_t rope, const TokenInfo* info, const int32_t* tables,
                             const CacheT* cache, int64_t page, float scale, float kv_scale, float* o_part,
                             float* ml_part) {
  // 576-wide entries need ~90 KB: above the 48 KB default, within every target's limit (SM120: 99 KB).
  allow_dynamic_smem(attend_kernel<CacheT>, 98 * 1024);
  launch_plain(attend_kernel<CacheT>, grid, 32 * heads_per_block, smem, s, q_full, static_cast<int>(heads),
               heads_per_block, static_cast<int>(latent), static_cast<int>(rope), info, tables, cache,
               static_cast<int>(page), scale, kv_scale, o_part, ml_part);
}
}  // namespace

void launch_mla_attend(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                       const TokenInfo* info, const int32_t* tables, const KvCacheArg& cache, int64_t cache_pages,
                       int64_t page, int64_t splits, float scale, float* o_lat, float* scratch, MlaKernel kernel,
                       cudaStream_t s, float* lse, const MlaDecodeLaunch& how_asked) {
  if (tokens == 0) return;
  const int64_t entry = latent + rope;
  // The KV-major kernel's splits in clusters merge their partials there (mla_decode_cluster): the
  // combine then sees one part a cluster.
  MlaDecodeLaunch how = how_asked;
  how.cluster = kernel == MlaKernel::kKvMajor ? mla_decode_cluster(how_asked, splits) : 1;
  const int64_t parts = splits / how.cluster;
  // With one part the wgmma and KV-major kernels normalise their output and write it in place of
  // the partials (same layout at part 0): no combine (at batch 128 it read and wrote 33 MB).
  const bool direct = parts == 1 && ((kernel == MlaKernel::kWgmma && !cache.fp8) || kernel == MlaKernel::kKvMajor);
  float* o_part = direct ? o_lat : scratch;
  float* ml_part = scratch + splits * tokens * heads * latent;
  if (kernel == MlaKernel::kWgmma && !cache.fp8) {
    // (The wgmma kernel reads bf16 only; the backend refuses it for an fp8 cache by name.)
    launch_mla_attend_wgmma_partials(q_full, tokens, heads, latent, rope, info, tables, cache.bf16(), cache_pages, page,
                                     splits, scale, o_part, ml_part, how.wgmma_early, how.wgmma_pairs, s);
  } else if (kernel == MlaKernel::kKvMajor) {
    launch_mla_attend_kv_major_partials(q_full, tokens, heads, latent, rope, info, tables, cache, page, splits, scale,
                                        o_part, ml_part, how, s);
  } else if (kernel == MlaKernel::kTensorCore && !cache.fp8) {
    // (The heads-as-M kernel reads bf16 only; the backend refuses it for an fp8 cache by name.)
    launch_mla_attend_mma_partials(q_full, tokens, heads, latent, rope, info, tables, cache.bf16(), page, splits, scale,
                                   o_part, ml_part, s);
  } else {
    const int heads_per_block = static_cast<int>(std::min<int64_t>(heads, kMaxHeadsPerBlock));
    const int64_t head_groups = (heads + heads_per_block - 1) / heads_per_block;
    const size_t smem = (kTile * (entry + 1) + heads_per_block * entry) * sizeof(float);
    dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(tokens), static_cast<unsigned>(head_groups));
    if (cache.fp8)
      launch_attend_cuda_core(grid, heads_per_block, smem, s, q_full, heads, latent, rope, info, tables, cache.bytes(),
                              page, scale, cache.scale, o_part, ml_part);
    else
      launch_attend_cuda_core(grid, heads_per_block, smem, s, q_full, heads, latent, rope, info, tables, cache.bf16(),
                              page, scale, 1.0f, o_part, ml_part);
  }
  if (direct) {
    if (lse) launch_mla_lse_from_partials(ml_part, tokens, heads, lse, s);
    return;
  }
  // Column blocks by the number of (token, head) pairs: narrow ones when there are very few (batch
  // 1 at 8 or 16 heads; at 64 heads they were slower), whole 512-wide rows when there are thousands (each block is a
  // short chain of loads: 32768 blocks of a quarter row made the batch-128 combine a sixth of the attention time).
  const int64_t pairs = tokens * heads;
  const int cols = pairs <= 16 ? 8 : pairs >= 1024 ? 128 : 32;
  auto combine = cols == 8 ? combine_kernel<8, 16> : cols == 128 ? combine_kernel<128, 8> : combine_kernel<32, 8>;
  dim3 cgrid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads),
             static_cast<unsigned>((latent + 4 * cols - 1) / (4 * cols)));
  launch_dependent(combine, cgrid, kCombineThreads, 0, s, o_part, ml_part, static_cast<int>(parts),
                   static_cast<int>(tokens), static_cast<int>(heads), static_cast<int>(latent), o_lat, lse);
}

int mla_decode_cluster(const MlaDecodeLaunch& how, int64_t splits) {
  int c = 1;
  while (c * 2 <= how.cluster && splits % (c * 2) == 0) c *= 2;
  return c;
}

int64_t mla_attend_scratch_floats(int64_t tokens, int64_t heads, int64_t latent, int64_t max_splits) {
  return max_splits * tokens * heads * (latent + 2);
}

void launch_mla_up_v(const float* o_lat, int64_t o_lat_row, int64_t tokens, int64_t heads, int64_t latent,
                     const __nv_bfloat16* kv_b, int64_t nope, int64_t v, float* out, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  launch_plain(up_v_kernel, grid, 128, 0, s, o_lat, o_lat_row, heads, latent, kv_b, nope, v, out);
}

}  // namespace tessera::ops::cuda
