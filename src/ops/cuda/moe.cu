// MoE router kernels (spec §3.1): fp32 logits of bf16 router weights, sigmoid scores, correction
// bias for selection only, group-limited top-k, normalised and scaled weights of the unbiased scores.
#include <cfloat>

#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {

namespace {

// Blocks over (8 tokens, 8 experts), a warp per expert row: each 16-byte piece of the router
// weights is read once for up to 8 tokens (fp32 activations, as the reference computes the router
// in fp32), and even one token spreads the weights over many SMs.
constexpr int kRouterTokens = 8;
__global__ void router_logits_kernel(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w,
                                     int64_t experts, float* logits) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t e = static_cast<int64_t>(blockIdx.y) * warps + warp;
  if (e >= experts) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRouterTokens;
  const int nt = static_cast<int>(tokens - t0 < kRouterTokens ? tokens - t0 : kRouterTokens);
  const __nv_bfloat16* we = w + e * hidden;
  float acc[kRouterTokens];
#pragma unroll
  for (int tt = 0; tt < kRouterTokens; ++tt) acc[tt] = 0.0f;
  if (hidden % 8 == 0) {
    for (int64_t i = lane * 8; i < hidden; i += 256) {
      const uint4 raw = *reinterpret_cast<const uint4*>(we + i);
      const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
      float wf[8];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(pair[k]);
        wf[2 * k] = f.x;
        wf[2 * k + 1] = f.y;
      }
#pragma unroll
      for (int tt = 0; tt < kRouterTokens; ++tt) {
        if (tt >= nt) break;
        const float4 a = *reinterpret_cast<const float4*>(x + (t0 + tt) * hidden + i);
        const float4 b = *reinterpret_cast<const float4*>(x + (t0 + tt) * hidden + i + 4);
        acc[tt] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3] + b.x * wf[4] + b.y * wf[5] + b.z * wf[6] +
                   b.w * wf[7];
      }
    }
  } else {
    for (int64_t i = lane; i < hidden; i += 32) {
      const float wv = __bfloat162float(we[i]);
      for (int tt = 0; tt < nt; ++tt) acc[tt] += x[(t0 + tt) * hidden + i] * wv;
    }
  }
#pragma unroll
  for (int tt = 0; tt < kRouterTokens; ++tt) {
    float v = acc[tt];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && tt < nt) logits[(t0 + tt) * experts + e] = v;
  }
}

constexpr int kMaxExperts = 1024;
constexpr int kMaxGroups = 64;

// One warp per token: sigmoid scores and biased scores in shared memory, group scores (sum of each
// group's top two) and the top-k by warp-wide arg-max reductions. Ties go to the lower index, as in
// the CPU reference.
constexpr int kSelectWarps = 4;

struct Best {
  float v;
  int i;
};
// The larger value, or on equal values the lower index; i < 0 marks "none".
__device__ inline Best better(Best a, Best b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}
__device__ inline Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  return b;
}

__global__ void __launch_bounds__(kSelectWarps * 32)
    router_select_kernel(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                         int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                         float* weights) {
  __shared__ float biased_s[kSelectWarps][kMaxExperts];
  __shared__ float score_s[kSelectWarps][kMaxExperts];  // unbiased sigmoid scores
  __shared__ float gscore_s[kSelectWarps][kMaxGroups];
  __shared__ bool gkeep_s[kSelectWarps][kMaxGroups];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kSelectWarps) + warp;
  if (t >= tokens) return;
  float* biased = biased_s[warp];
  const float* l = logits + t * experts;
  const int E = static_cast<int>(experts);
  float* score = score_s[warp];
  for (int e = lane; e < E; e += 32) {
    score[e] = 1.0f / (1.0f + expf(-l[e]));
    biased[e] = score[e] + bias[e];
  }
  __syncwarp();
  if (groups > 1) {
    const int G = static_cast<int>(groups), per_group = E / G;
    for (int g = 0; g < G; ++g) {
      // Top two of the group: the best, then the best of the rest.
      Best b1{-FLT_MAX, -1};
      for (int e = g * per_group + lane; e < (g + 1) * per_group; e += 32) b1 = better(b1, Best{biased[e], e});
      b1 = warp_best(b1);
      Best b2{-FLT_MAX, -1};
      for (int e = g * per_group + lane; e < (g + 1) * per_group; e += 32)
        if (e != b1.i) b2 = better(b2, Best{biased[e], e});
      b2 = warp_best(b2);
      if (lane == 0) gscore_s[warp][g] = (b1.i >= 0 ? b1.v : -FLT_MAX) + (b2.i >= 0 ? b2.v : -FLT_MAX);
    }
    __syncwarp();
    // Keep the top_groups groups (ties: lower group first); lanes own groups lane, lane + 32.
    bool keep[2] = {false, false};
    for (int64_t k = 0; k < top_groups; ++k) {
      Best b{-FLT_MAX, -1};
      for (int j = 0; j < 2; ++j) {
        const int g = lane + 32 * j;
        if (g < G && !keep[j]) b = better(b, Best{gscore_s[warp][g], g});
      }
      b = warp_best(b);
      if (b.i >= 0 && (b.i & 31) == lane) keep[b.i >> 5] = true;
    }
    for (int j = 0; j < 2; ++j)
      if (lane + 32 * j < G) gkeep_s[warp][lane + 32 * j] = keep[j];
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!gkeep_s[warp][e / per_group]) biased[e] = -FLT_MAX;
    __syncwarp();
  }
  // Lane k keeps the k-th choice (top_k <= 32); the sum runs in selection order, as on the CPU.
  float sum = 0.0f, my_score = 0.0f;
  int my_id = 0;
  for (int k = 0; k < static_cast<int>(top_k); ++k) {
    Best b{-INFINITY, -1};
    for (int e = lane; e < E; e += 32)
      if (biased[e] != -INFINITY) b = better(b, Best{biased[e], e});
    b = warp_best(b);
    const int arg = b.i >= 0 ? b.i : 0;
    const float sc = score[arg];
    __syncwarp();
    if (lane == (arg & 31)) biased[arg] = -INFINITY;  // taken
    __syncwarp();
    if (lane == k) {
      my_id = arg;
      my_score = sc;
    }
    sum += sc;
  }
  if (lane < top_k) {
    float w = my_score;
    if (normalize) w /= (sum + 1e-20f);
    ids[t * top_k + lane] = my_id;
    weights[t * top_k + lane] = w * scaling;
  }
}

}  // namespace

void launch_router_logits(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                          float* logits, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>((tokens + kRouterTokens - 1) / kRouterTokens), static_cast<unsigned>((experts + 7) / 8));
  router_logits_kernel<<<grid, 256, 0, s>>>(x, tokens, hidden, w, experts, logits);
}

void launch_router_select(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                          int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                          float* weights, cudaStream_t s) {
  if (tokens == 0) return;
  router_select_kernel<<<static_cast<unsigned>((tokens + kSelectWarps - 1) / kSelectWarps), kSelectWarps * 32, 0, s>>>(
      logits, bias, tokens, experts, top_k, groups, top_groups, normalize, scaling, ids, weights);
}

}  // namespace tessera::ops::cuda
