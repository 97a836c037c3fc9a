// MoE router kernels (spec §3.1): fp32 logits of bf16 router weights, sigmoid scores, correction
// bias for selection only, group-limited top-k, normalised and scaled weights of the unbiased scores.
#include <cfloat>
#include <type_traits>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

// Blocks over (8 tokens, 2 experts); four warps split each expert row, so that one token spreads
// the 5.5 MB of Kimi-K2.5's router over 192 blocks and a warp has all of its 16-byte pieces (7 at
// hidden 7168) in flight at once: a load at a time would put a memory latency in front of every
// 512 bytes. Each piece is read once for up to 8 tokens (fp32 activations: the reference computes
// the router in fp32). Steps of more tokens use the split-bf16 GEMM path (cuda_ops.cpp).
constexpr int kRouterTokens = 8;
constexpr int kSliceWarps = 4;       // warps splitting one expert row
constexpr int kExpertsPerBlock = 2;  // 8 warps a block
constexpr int kAhead = 8;            // 16-byte pieces a lane loads before using them
// One block's logits: experts blockIdx.y * kExpertsPerBlock + (0, 1) for tokens blockIdx.x * 8 + ...
// Calls pdl_wait (every thread, once) after its first weight loads.
__device__ inline void router_logits_block(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w,
                                           int64_t experts, float* logits) {
  __shared__ float part[kExpertsPerBlock][kSliceWarps][kRouterTokens];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slot = warp / kSliceWarps, slice = warp % kSliceWarps;
  const int64_t e = static_cast<int64_t>(blockIdx.y) * kExpertsPerBlock + slot;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRouterTokens;
  const int nt = static_cast<int>(tokens - t0 < kRouterTokens ? tokens - t0 : kRouterTokens);
  float acc[kRouterTokens];
#pragma unroll
  for (int tt = 0; tt < kRouterTokens; ++tt) acc[tt] = 0.0f;
  const __nv_bfloat16* we = w + e * hidden;
  const bool vector_loads = e < experts && hidden % 8 == 0;
  // Warp `slice` takes the 256-element chunks slice, slice + 4, ...: kAhead of them in flight.
  const int64_t chunks = (hidden + 255) / 256;
  uint4 raw[kAhead];
  auto load = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t i = (c0 + u * kSliceWarps) * 256 + lane * 8;
      raw[u] = i < hidden ? *reinterpret_cast<const uint4*>(we + i) : make_uint4(0, 0, 0, 0);
    }
  };
  // The router's weights are constant: the first of them are read before the previous kernel has
  // finished (launch.cuh); x, its output, after.
  if (vector_loads) load(slice);
  pdl_wait();  // launched with launch_dependent
  if (e < experts) {
    if (vector_loads) {
      // acc[tt] += x[t0 + tt, i .. i + 8) · w[e, i .. i + 8).
      auto accumulate = [&](const uint4& r, int64_t i) {
        const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&r);
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
      };
      for (int64_t c0 = slice; c0 < chunks; c0 += kSliceWarps * kAhead) {
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
          const int64_t i = (c0 + u * kSliceWarps) * 256 + lane * 8;
          if (i < hidden) accumulate(raw[u], i);
        }
        if (c0 + kSliceWarps * kAhead < chunks) load(c0 + kSliceWarps * kAhead);
      }
    } else {
      for (int64_t i = slice * 32 + lane; i < hidden; i += 32 * kSliceWarps) {
        const float wv = __bfloat162float(we[i]);
        for (int tt = 0; tt < nt; ++tt) acc[tt] += x[(t0 + tt) * hidden + i] * wv;
      }
    }
  }
#pragma unroll
  for (int tt = 0; tt < kRouterTokens; ++tt) {
    float v = acc[tt];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) part[slot][slice][tt] = v;
  }
  __syncthreads();
  if (threadIdx.x < kExpertsPerBlock * kRouterTokens) {
    const int s = threadIdx.x / kRouterTokens, tt = threadIdx.x % kRouterTokens;
    const int64_t es = static_cast<int64_t>(blockIdx.y) * kExpertsPerBlock + s;
    if (es < experts && tt < nt) {
      float v = 0.0f;
      for (int k = 0; k < kSliceWarps; ++k) v += part[s][k][tt];
      logits[(t0 + tt) * experts + es] = v;
    }
  }
}

constexpr int kMaxExperts = 1024;
constexpr int kMaxGroups = 64;

// One warp per token: sigmoid scores and biased scores, group scores (sum of each group's top two)
// and the top-k by warp-wide arg-max reductions. Ties go to the lower index, as in the CPU
// reference.
constexpr int kSelectWarps = 4;

// A (value, index) pair as one 64-bit key whose unsigned order is the selection order: larger
// value first, then lower index. 0 is "none", below every pair. Keys make each comparison two
// integer compares and two selects without branches: the selection runs on one warp a token, and
// with a branching comparison (a convergence barrier a step) it took ~12 µs of the fused router's
// 16 at batch 1, 3258 instructions, 535 of them branches (ncu source counters).
__device__ inline uint64_t rank_key(float v, int i) {
  uint32_t b = __float_as_uint(v + 0.0f);  // -0 -> +0: equal values must tie
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | ~static_cast<uint32_t>(i);
}
__device__ inline int key_index(uint64_t k) { return static_cast<int>(~static_cast<uint32_t>(k)); }
__device__ inline float key_value(uint64_t k) {
  const uint32_t b = static_cast<uint32_t>(k >> 32);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}
__device__ inline uint64_t key_max(uint64_t a, uint64_t b) { return a > b ? a : b; }
__device__ inline uint64_t warp_max(uint64_t k) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) k = key_max(k, __shfl_xor_sync(0xffffffffu, k, o));
  return k;
}
// The largest of n keys, as a tree (depth log2 n instead of a chain of n).
template <int N>
__device__ inline uint64_t max_of(const uint64_t (&k)[N]) {
  uint64_t t[N];
#pragma unroll
  for (int j = 0; j < N; ++j) t[j] = k[j];
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int j = 0; j + w < N; j += 2 * w) t[j] = key_max(t[j], t[j + w]);
  return t[0];
}

// Lane l holds experts l, l + 32, ... (kPerLane of them, >= experts / 32) in registers, with
// compile-time indices only, so every load of the scores is in flight at once and no pick waits on
// shared memory. kPerLane is a template parameter because the code runs once per step, from a cold
// instruction cache: a 1024-expert body for 384 experts cost more in instruction fetches than in
// work (so is kGrouped: Kimi routes over one group and skips that part).
// Token t's selection by one warp (`warp` indexes the per-warp shared arrays). Logits are read
// through L2 (__ldcg): in the fused kernel other blocks wrote them during this launch.
template <int kPerLane, bool kGrouped>
__device__ void router_select_token(const float* logits, const float* bias, int64_t t, int64_t experts, int64_t top_k,
                                    int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                                    float* weights, int warp, float (*gscore_s)[kMaxGroups],
                                    bool (*gkeep_s)[kMaxGroups]) {
  const int lane = threadIdx.x & 31;
  const float* l = logits + t * experts;
  const int E = static_cast<int>(experts);
  float score[kPerLane];   // unbiased sigmoid scores
  uint64_t key[kPerLane];  // of the biased scores; 0 once taken or past the last expert
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    const float lv = e < E ? __ldcg(l + e) : 0.0f, bv = e < E ? bias[e] : 0.0f;
    score[j] = 1.0f / (1.0f + expf(-lv));
    key[j] = e < E ? rank_key(score[j] + bv, e) : 0;
  }
  if constexpr (kGrouped) {
    const int G = static_cast<int>(groups), per_group = E / G;
    for (int g = 0; g < G; ++g) {
      // Top two of the group: the best, then the best of the rest.
      uint64_t in_group[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) in_group[j] = (lane + 32 * j) / per_group == g ? key[j] : 0;
      const uint64_t b1 = warp_max(max_of(in_group));
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) in_group[j] = in_group[j] == b1 ? 0 : in_group[j];
      const uint64_t b2 = warp_max(max_of(in_group));
      if (lane == 0) gscore_s[warp][g] = (b1 ? key_value(b1) : -FLT_MAX) + (b2 ? key_value(b2) : -FLT_MAX);
    }
    __syncwarp();
    // Keep the top_groups groups (ties: lower group first); lanes own groups lane, lane + 32.
    bool keep[2] = {false, false};
    for (int64_t k = 0; k < top_groups; ++k) {
      uint64_t b = 0;
      for (int j = 0; j < 2; ++j) {
        const int g = lane + 32 * j;
        if (g < G && !keep[j]) b = key_max(b, rank_key(gscore_s[warp][g], g));
      }
      b = warp_max(b);
      const int gi = key_index(b);
      if (b != 0 && (gi & 31) == lane) keep[gi >> 5] = true;
    }
    for (int j = 0; j < 2; ++j)
      if (lane + 32 * j < G) gkeep_s[warp][lane + 32 * j] = keep[j];
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < E && !gkeep_s[warp][e / per_group]) key[j] = rank_key(-FLT_MAX, e);
    }
  }
  // Lane k keeps the k-th choice (top_k <= 32); the sum runs in selection order, as on the CPU.
  float sum = 0.0f, my_score = 0.0f;
  int my_id = 0;
  for (int k = 0; k < static_cast<int>(top_k); ++k) {
    const uint64_t best = warp_max(max_of(key));
    const int arg = best != 0 ? key_index(best) : 0;
    float mine = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const bool taken = lane + 32 * j == arg;
      mine = taken ? score[j] : mine;
      key[j] = taken ? 0 : key[j];
    }
    const float sc = __shfl_sync(0xffffffffu, mine, arg & 31);
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

template <int kPerLane, bool kGrouped>
__global__ void __launch_bounds__(kSelectWarps * 32)
    router_select_kernel(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                         int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                         float* weights) {
  pdl_wait();  // first: launched with launch_dependent
  __shared__ float gscore_s[kSelectWarps][kMaxGroups];
  __shared__ bool gkeep_s[kSelectWarps][kMaxGroups];
  const int warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kSelectWarps) + warp;
  if (t >= tokens) return;
  router_select_token<kPerLane, kGrouped>(logits, bias, t, experts, top_k, groups, top_groups, normalize, scaling, ids,
                                          weights, warp, gscore_s, gkeep_s);
}

// Logits and selection in one launch for steps of at most kRouterTokens tokens: the blocks compute
// the logits (router_logits_block); the last block to finish (a device counter, reset by it for
// the next call) selects, a warp per token. Saves the select kernel's launch and ramp.
template <int kPerLane, bool kGrouped>
__global__ void __launch_bounds__(kSliceWarps* kExpertsPerBlock * 32)
    router_fused_kernel(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                        float* logits, const float* bias, int64_t top_k, int64_t groups, int64_t top_groups,
                        bool normalize, float scaling, int32_t* ids, float* weights, unsigned* done_blocks) {
  router_logits_block(x, tokens, hidden, w, experts, logits);  // calls pdl_wait
  // Each writer makes its logits visible device-wide before the block counts itself done.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(done_blocks, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) *done_blocks = 0;
  constexpr int kWarps = kSliceWarps * kExpertsPerBlock;
  static_assert(kWarps >= kRouterTokens, "a warp per token");
  __shared__ float gscore_s[kWarps][kMaxGroups];
  __shared__ bool gkeep_s[kWarps][kMaxGroups];
  const int warp = threadIdx.x >> 5;
  if (warp < tokens)
    router_select_token<kPerLane, kGrouped>(logits, bias, warp, experts, top_k, groups, top_groups, normalize, scaling,
                                            ids, weights, warp, gscore_s, gkeep_s);
}

}  // namespace

namespace {
// Calls run(std::integral_constant<int, kPerLane>) with the smallest instance that holds `experts`.
template <class Run>
void with_experts_per_lane(int64_t experts, Run&& run) {
  if (experts <= 4 * 32) {
    run(std::integral_constant<int, 4>{});
  } else if (experts <= 8 * 32) {
    run(std::integral_constant<int, 8>{});
  } else if (experts <= 12 * 32) {
    run(std::integral_constant<int, 12>{});
  } else if (experts <= 16 * 32) {
    run(std::integral_constant<int, 16>{});
  } else {
    run(std::integral_constant<int, kMaxExperts / 32>{});
  }
}
}  // namespace

void launch_router_select(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                          int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                          float* weights, cudaStream_t s) {
  if (tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((tokens + kSelectWarps - 1) / kSelectWarps);
  with_experts_per_lane(experts, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    auto kernel = groups > 1 ? router_select_kernel<kPerLane, true> : router_select_kernel<kPerLane, false>;
    launch_dependent(kernel, blocks, kSelectWarps * 32, 0, s, logits, bias, tokens, experts, top_k, groups, top_groups,
                     normalize, scaling, ids, weights);
  });
}

void launch_router_fused(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                         float* logits, const float* bias, int64_t top_k, int64_t groups, int64_t top_groups,
                         bool normalize, float scaling, int32_t* ids, float* weights, unsigned* done_blocks,
                         cudaStream_t s) {
  if (tokens == 0) return;
  const dim3 grid(1, static_cast<unsigned>((experts + kExpertsPerBlock - 1) / kExpertsPerBlock));
  with_experts_per_lane(experts, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    auto kernel = groups > 1 ? router_fused_kernel<kPerLane, true> : router_fused_kernel<kPerLane, false>;
    launch_dependent(kernel, grid, kSliceWarps * kExpertsPerBlock * 32, 0, s, x, tokens, hidden, w, experts, logits,
                     bias, top_k, groups, top_groups, normalize, scaling, ids, weights, done_blocks);
  });
}

}  // namespace tessera::ops::cuda
