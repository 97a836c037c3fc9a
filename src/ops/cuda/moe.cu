// MoE router kernels (spec §3.1): fp32 logits of bf16 router weights, sigmoid scores, correction
// bias for selection only, group-limited top-k, normalised and scaled weights of the unbiased scores.
#include <cfloat>

#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {

namespace {

// Blocks over (token, group of 8 experts), a warp per expert row, so that even one token spreads
// the router weights over many SMs.
__global__ void router_logits_kernel(const float* x, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                                     float* logits) {
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* xt = x + t * hidden;
  for (int64_t e = blockIdx.y * warps + warp; e < experts; e += static_cast<int64_t>(gridDim.y) * warps) {
    const __nv_bfloat16* we = w + e * hidden;
    float acc = 0.0f;
    for (int64_t i = lane; i < hidden; i += 32) acc += xt[i] * __bfloat162float(we[i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) logits[t * experts + e] = acc;
  }
}

constexpr int kMaxExperts = 1024;
constexpr int kMaxGroups = 64;

// One thread per token: the selection is tiny next to the expert GEMMs, and a serial loop keeps
// the tie-breaking (lower index first) identical to the CPU reference.
__global__ void router_select_kernel(const float* logits, const float* bias, int64_t tokens, int64_t experts,
                                     int64_t top_k, int64_t groups, int64_t top_groups, bool normalize, float scaling,
                                     int32_t* ids, float* weights) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  float biased[kMaxExperts];
  const float* l = logits + t * experts;
  for (int64_t e = 0; e < experts; ++e) biased[e] = 1.0f / (1.0f + expf(-l[e])) + bias[e];
  const int64_t per_group = experts / groups;
  if (groups > 1) {
    float gscore[kMaxGroups];
    bool keep[kMaxGroups];
    for (int64_t g = 0; g < groups; ++g) {
      float best = -FLT_MAX, second = -FLT_MAX;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (biased[e] > best) {
          second = best;
          best = biased[e];
        } else if (biased[e] > second) {
          second = biased[e];
        }
      }
      gscore[g] = best + second;
      keep[g] = false;
    }
    for (int64_t k = 0; k < top_groups; ++k) {
      int64_t arg = -1;
      for (int64_t g = 0; g < groups; ++g)
        if (!keep[g] && (arg < 0 || gscore[g] > gscore[arg])) arg = g;
      keep[arg] = true;
    }
    for (int64_t e = 0; e < experts; ++e)
      if (!keep[e / per_group]) biased[e] = -FLT_MAX;
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    int64_t arg = -1;
    for (int64_t e = 0; e < experts; ++e)
      if (biased[e] != -INFINITY && (arg < 0 || biased[e] > biased[arg])) arg = e;
    biased[arg] = -INFINITY;  // taken
    ids[t * top_k + k] = static_cast<int32_t>(arg);
    const float score = 1.0f / (1.0f + expf(-l[arg]));
    weights[t * top_k + k] = score;
    sum += score;
  }
  for (int64_t k = 0; k < top_k; ++k) {
    float w = weights[t * top_k + k];
    if (normalize) w /= (sum + 1e-20f);
    weights[t * top_k + k] = w * scaling;
  }
}

}  // namespace

void launch_router_logits(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                          float* logits, cudaStream_t s) {
  if (tokens == 0) return;
  dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((experts + 7) / 8));
  router_logits_kernel<<<grid, 256, 0, s>>>(x, hidden, w, experts, logits);
}

void launch_router_select(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                          int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                          float* weights, cudaStream_t s) {
  if (tokens == 0) return;
  router_select_kernel<<<static_cast<unsigned>((tokens + 63) / 64), 64, 0, s>>>(
      logits, bias, tokens, experts, top_k, groups, top_groups, normalize, scaling, ids, weights);
}

}  // namespace tessera::ops::cuda
