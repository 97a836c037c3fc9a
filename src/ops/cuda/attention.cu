// MLA attention kernels (spec §4): the query is absorbed into the latent space (q_nope · W_UK),
// attention runs as multi-query attention over the bf16 latent cache [c_kv | k_pe] with the latent
// itself as the value, then W_UV maps the result back to per-head values. The same absorbed path
// serves prefill and decode in this first version.
#include <cfloat>

#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {

namespace {

__global__ void kv_cache_write_kernel(const float* latent, int64_t entry, const TokenInfo* info, const int32_t* tables,
                                      __nv_bfloat16* cache, int64_t page) {
  const int64_t t = blockIdx.x;
  const TokenInfo ti = info[t];
  const int64_t page_id = tables[ti.table_offset + ti.pos / page];
  __nv_bfloat16* dst = cache + (page_id * page + ti.pos % page) * entry;
  for (int64_t i = threadIdx.x; i < entry; i += blockDim.x) dst[i] = __float2bfloat16_rn(latent[t * entry + i]);
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

constexpr int kTile = 32;           // cache positions per shared-memory tile (one per lane)
constexpr int kHeadsPerBlock = 4;   // one warp per head; the tile is shared by the block's heads
constexpr int kMaxLatentPerLane = 16;  // latent <= 512

// One block per (token, group of heads). Each tile of 32 cache rows is staged in shared memory
// once for all heads of the block; lane p scores position p; the output accumulates per lane over
// latent dims lane, lane + 32, ... with an online softmax.
__global__ void attend_kernel(const float* q_full, int64_t heads, int64_t latent, int64_t rope, const TokenInfo* info,
                              const int32_t* tables, const __nv_bfloat16* cache, int64_t page, float scale,
                              float* o_lat) {
  extern __shared__ float smem[];
  const int64_t entry = latent + rope;
  const int64_t row_stride = entry + 1;  // +1 float: lanes reading different rows hit different banks
  float* tile = smem;                                   // [kTile, row_stride]
  float* qs = smem + kTile * row_stride;                // [kHeadsPerBlock, entry]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x, h = blockIdx.y * kHeadsPerBlock + warp;
  const bool active = h < heads;
  const TokenInfo ti = info[t];
  const int64_t visible = ti.pos + 1;
  if (active)
    for (int64_t i = lane; i < entry; i += 32) qs[warp * entry + i] = q_full[(t * heads + h) * entry + i];
  float acc[kMaxLatentPerLane];
  for (int i = 0; i < kMaxLatentPerLane; ++i) acc[i] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t base = 0; base < visible; base += kTile) {
    __syncthreads();
    const int64_t n = min(static_cast<int64_t>(kTile), visible - base);
    for (int64_t idx = threadIdx.x; idx < n * entry; idx += blockDim.x) {
      const int64_t p = idx / entry, i = idx % entry, pos = base + p;
      const int64_t page_id = tables[ti.table_offset + pos / page];
      tile[p * row_stride + i] = __bfloat162float(cache[(page_id * page + pos % page) * entry + i]);
    }
    __syncthreads();
    if (!active) continue;
    float score = -FLT_MAX;
    if (lane < n) {
      const float* k = tile + lane * row_stride;
      const float* qh = qs + warp * entry;
      float s = 0.0f;
      for (int64_t i = 0; i < entry; ++i) s += qh[i] * k[i];
      score = s * scale;
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
    for (int i = 0; i < kMaxLatentPerLane; ++i) acc[i] *= alpha;
    for (int64_t j = 0; j < n; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, static_cast<int>(j));
      const float* k = tile + j * row_stride;
      for (int i = 0; i < kMaxLatentPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < latent) acc[i] += pj * k[d];
      }
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
  for (int i = 0; i < kMaxLatentPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < latent) o_lat[(t * heads + h) * latent + d] = acc[i] * inv;
  }
}

// One block per (token, head); a warp per output row j of W_UV[h], lanes over the latent.
__global__ void up_v_kernel(const float* o_lat, int64_t heads, int64_t latent, const __nv_bfloat16* kv_b, int64_t nope,
                            int64_t v, float* out) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* ol = o_lat + (t * heads + h) * latent;
  for (int64_t j = warp; j < v; j += warps) {
    const __nv_bfloat16* w = kv_b + (h * (nope + v) + nope + j) * latent;
    float acc = 0.0f;
    for (int64_t i = lane; i < latent; i += 32) acc += __bfloat162float(w[i]) * ol[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[t * heads * v + h * v + j] = acc;
  }
}

}  // namespace

void launch_kv_cache_write(const float* latent, int64_t tokens, int64_t entry, const TokenInfo* info,
                           const int32_t* tables, __nv_bfloat16* cache, int64_t page, cudaStream_t s) {
  if (tokens > 0)
    kv_cache_write_kernel<<<static_cast<unsigned>(tokens), 128, 0, s>>>(latent, entry, info, tables, cache, page);
}

void launch_mla_absorb_q(const float* q, int64_t tokens, int64_t heads, int64_t nope, int64_t rope,
                         const __nv_bfloat16* kv_b, int64_t v, int64_t latent, float* q_full, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  absorb_q_kernel<<<grid, 128, nope * sizeof(float), s>>>(q, heads, nope, rope, kv_b, v, latent, q_full);
}

void launch_mla_attend(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                       const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache, int64_t page,
                       float scale, float* o_lat, cudaStream_t s) {
  if (tokens == 0) return;
  const int64_t entry = latent + rope;
  const size_t smem = (kTile * (entry + 1) + kHeadsPerBlock * entry) * sizeof(float);
  static bool configured = false;
  if (!configured) {
    // Up to 576-wide entries need ~85 KB: above the 48 KB default, within every target's limit.
    cudaFuncSetAttribute(attend_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
    configured = true;
  }
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  attend_kernel<<<grid, 32 * kHeadsPerBlock, smem, s>>>(q_full, heads, latent, rope, info, tables, cache, page, scale,
                                                        o_lat);
}

void launch_mla_up_v(const float* o_lat, int64_t tokens, int64_t heads, int64_t latent, const __nv_bfloat16* kv_b,
                     int64_t nope, int64_t v, float* out, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  up_v_kernel<<<grid, 128, 0, s>>>(o_lat, heads, latent, kv_b, nope, v, out);
}

}  // namespace tessera::ops::cuda
