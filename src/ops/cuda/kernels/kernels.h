// Launchers of the CUDA kernels (defined in the .cu files of the folders beside it). Plain pointers and
// sizes, so the backend class can be compiled by the host compiler.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kernel_kinds.h"
#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

// --- elementwise/elementwise.cu ---
// out[t, :] = float(table[ids[t], :]); ids already checked on the host.
void launch_embedding(const __nv_bfloat16* table, const int32_t* ids, int64_t tokens, int64_t hidden, float* out,
                      cudaStream_t s);
// RMSNorm of columns [col_begin, col_begin + d) of x [rows, width]; out is [rows, d] (out_width == d)
// or as wide as x (same columns written).
void launch_rms_norm(const float* x, int64_t rows, int64_t width, int64_t col_begin, const float* weight, int64_t d,
                     float eps, float* out, int64_t out_width, cudaStream_t s);
// x [rows, width] += add, then out = rms_norm(x) over the whole row (one kernel).
void launch_add_rms_norm(float* x, const float* add, int64_t rows, int64_t width, const float* weight, float eps,
                         float* out, cudaStream_t s);
void launch_add(float* x, const float* y, int64_t n, cudaStream_t s);
void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
// The same values rounded to bf16 as launch_f32_to_bf16 rounds them (a GEMM's input, one pass fewer).
void launch_silu_mul_bf16(const float* gate, const float* up, __nv_bfloat16* out, int64_t n, cudaStream_t s);
// Interleaved-pair rotation; cos/sin [rows, half].
void launch_rope(float* x, int64_t rows, int64_t width, const float* cos, const float* sin, int64_t half,
                 int64_t col_begin, int64_t col_stride, int64_t count, cudaStream_t s);
// Reads `bytes` (a multiple of 16) as fast as it can (`tessera bench kernels`' read ceiling).
void launch_read_stream(const void* p, size_t bytes, void* sink, int num_sms, cudaStream_t s);
// Deterministic pseudo-random bf16 values in [-scale, scale) (benchmark and test data).
void launch_fill_random_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t s);
// Deterministic pseudo-random bytes, each (random & and_mask) | or_mask.
void launch_fill_random_bytes(uint8_t* p, int64_t n, uint64_t seed, uint8_t and_mask, uint8_t or_mask, cudaStream_t s);
void launch_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t s);
// in = hi + lo to ~2^-17 relative: two bf16 GEMMs over hi and lo reproduce an fp32-input product.
void launch_f32_to_bf16_split(const float* in, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t n, cudaStream_t s);
void launch_gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t n, float* out, cudaStream_t s);
// out[i] = x[pairs[i] / per_token]: the rows of the tokens of pairs sorted by expert
// (launch_moe_prepare's scratch.sorted), per_token slots a token; in fp32 or in bf16 (rounded as
// launch_f32_to_bf16 rounds: a GEMM's gathered input).
void launch_gather_pair_rows(const float* x, int64_t width, const int32_t* pairs, int per_token, int64_t n, float* out,
                             cudaStream_t s);
void launch_gather_pair_rows_bf16(const float* x, int64_t width, const int32_t* pairs, int per_token, int64_t n,
                                  __nv_bfloat16* out, cudaStream_t s);

// --- attention/attention.cu ---
// Per-token metadata of a step, uploaded once per attention call.
struct TokenInfo {
  int32_t pos;           // absolute position of this token
  int32_t table_offset;  // offset of its sequence's block table in the flat table array
};
// cache [pages, page, entry] bf16; latent [T, entry] fp32.
void launch_kv_cache_write(const float* latent, int64_t tokens, int64_t entry, const TokenInfo* info,
                           const int32_t* tables, __nv_bfloat16* cache, int64_t page, cudaStream_t s);
// cache [pages, page, entry] fp8 e4m3 bytes: sat_e4m3_rne(latent / scale) (ops::KvLayerView).
void launch_kv_cache_write_fp8(const float* latent, int64_t tokens, int64_t entry, const TokenInfo* info,
                               const int32_t* tables, uint8_t* cache, int64_t page, float scale, cudaStream_t s);
// --- attention/mla_prepare.cu ---
// Ops::mla_prepare in one launch: q [tokens, heads, nope + rope] gets its rope columns rotated; kv
// [tokens, latent + rope] gets c_kv normalised (norm_weight, eps) and k_pe rotated, in place, and
// is written to its cache slot (bf16, or fp8 e4m3 with `scale`). cos/sin [tokens, rope / 2].
struct MlaPrepareArgs {
  float* q;
  int64_t q_row;
  int heads, nope, rope, latent;
  float* kv;
  const float* norm_weight;
  float eps;
  const float* cos;
  const float* sin;
  const TokenInfo* info;
  const int32_t* tables;
  int64_t page;
  float scale;
  int64_t tokens;
};
// The replay check's view of the arguments (launch_gate.h): every field, none of the padding. The
// size check fails when a field is added, so that it is added here too.
inline void add_fields(Signature& s, const MlaPrepareArgs& a) {
  static_assert(sizeof(MlaPrepareArgs) == 112, "a field was added: add it to the signature");
  for (const void* p :
       {static_cast<const void*>(a.q), static_cast<const void*>(a.kv), static_cast<const void*>(a.norm_weight),
        static_cast<const void*>(a.cos), static_cast<const void*>(a.sin), static_cast<const void*>(a.info),
        static_cast<const void*>(a.tables)})
    s.add(p);
  for (int64_t v : {a.q_row, a.page, a.tokens, int64_t{a.heads}, int64_t{a.nope}, int64_t{a.rope}, int64_t{a.latent}})
    s.add(v);
  s.add(a.eps);
  s.add(a.scale);
}
void launch_mla_prepare(const MlaPrepareArgs& a, void* cache, bool fp8, cudaStream_t s);
// The latent cache as the attention kernels read it: bf16 elements, or fp8 e4m3 bytes whose values
// are q · scale.
struct KvCacheArg {
  const void* data = nullptr;
  bool fp8 = false;
  float scale = 1.0f;
  const __nv_bfloat16* bf16() const { return static_cast<const __nv_bfloat16*>(data); }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data); }
};
// q_full[t, h, :latent] = q_nope[t, h] · W_UK[h];  q_full[t, h, latent:] = q_pe[t, h].
void launch_mla_absorb_q(const float* q, int64_t tokens, int64_t heads, int64_t nope, int64_t rope,
                         const __nv_bfloat16* kv_b, int64_t v, int64_t latent, float* q_full, cudaStream_t s);
// o_lat[t, h, :] = softmax_s(scale · q_full[t, h] · cache[s]) · cache[s, :latent] over s <= pos(t).
// The context is split over `splits` blocks (mla_attend_splits) when the batch is small; partials
// are merged by a second kernel; `scratch` holds them (mla_attend_scratch_floats). latent <= 512.
// Implementations: CUDA cores in fp32 (any shape; bf16 or fp8 cache), tensor cores with heads as M
// (mma.sync bf16, 16 heads a block; needs mla_attend_mma_supported; bf16 cache only), KV-major
// mma.sync (bf16 or fp8 cache; mla_attend_kv_major_supported), or Hopper wgmma (64 heads a block,
// sm_90a; bf16 cache only): MlaKernel (kernel_kinds.h; kernel_registry.h chooses).
// Positions per split for a token that sees `visible` positions: an equal share of whole tiles.
// Each token's splits are computed from its own length in the kernels, so a step's launches do not
// depend on how long its contexts are (a recorded CUDA graph stays valid while they grow; only the
// split count comes from the host, see mla_attend_splits).
__host__ __device__ inline int mla_split_chunk(int visible, int splits, int tile) {
  return ((visible + splits - 1) / splits + tile - 1) / tile * tile;
}
// The positions [begin, end) that context split `split` of `splits` attends over for a token at
// `pos` (it sees pos + 1 positions), in `ntiles` tiles of `tile` (empty when the split is past the
// token's context): the prologue every decode kernel starts with.
struct MlaSplitRange {
  int begin, end, ntiles;
};
__host__ __device__ inline MlaSplitRange mla_split_range(int pos, int split, int splits, int tile) {
  const int visible = pos + 1;
  const int chunk = mla_split_chunk(visible, splits, tile);
  const int begin = split * chunk, end = visible < begin + chunk ? visible : begin + chunk;
  return {begin, end, end > begin ? (end - begin + tile - 1) / tile : 0};
}
bool mla_attend_mma_supported(int64_t latent, int64_t rope);
// The most context splits a step may use (the combine kernel holds a factor per split in shared
// memory): 256, so that a batch-1 step of the KV-major kernel (two blocks an SM) fills the GPU.
constexpr int kMlaMaxSplits = 256;
// Context splits for a step: the fewest whose blocks fill whole waves of the GPU. The wgmma kernel
// runs 64 heads a block and one block an SM, the mma.sync kernels 16 heads and two. Chosen for
// max_visible rounded up to an eighth of its power of two, so that it changes only every ~12% of
// context growth (each change makes a recorded decode graph stale).
// With `wgmma_pairs` (MlaDecodeLaunch) the wgmma kernel's parts are two blocks each.
int64_t mla_attend_splits(int64_t tokens, int64_t heads, int64_t max_visible, int num_sms,
                          MlaKernel kernel = MlaKernel::kKvMajor, bool wgmma_pairs = false);
// How the MLA decode kernels are launched. KV-major (attention/sm80_kv_major.cu): `early`, a
// dependent launch whose blocks start copying the rows earlier steps wrote before the kernel before
// it has finished (default on; TESSERA_MLA_EARLY_KV=0); `cluster`, up to this many consecutive
// context splits merge their partials in a cluster (sm_90+; 1 = none; an experiment). wgmma
// (attention/sm90_wgmma.cu): `wgmma_early`, its first two tiles of such rows are copied before its
// wait (default on; TESSERA_MLA_WGMMA_EARLY=0); `wgmma_pairs`, each part (what the split policy counts
// and the combine merges) is two blocks, a cluster merging its halves (sm_90a; TESSERA_MLA_WGMMA_PAIRS).
// Callers pass the same `how` to mla_attend_splits and launch_mla_attend.
struct MlaDecodeLaunch {
  bool early = false;
  bool wgmma_early = false;
  bool wgmma_pairs = false;
  int cluster = 1;
};
// What the TESSERA_MLA_DECODE_CLUSTERS / TESSERA_MLA_EARLY_KV / TESSERA_MLA_WGMMA_EARLY switches ask for on a device of
// compute capability `sm` (10 x major + minor), in a step where every token is its sequence's only new one
// (`one_token_a_sequence`: the cache rows before each token's position were written by earlier
// steps, which `early` needs) or not.
MlaDecodeLaunch mla_decode_launch(int sm, bool one_token_a_sequence);
// `cache` holds `cache_pages` pages of `page` positions (the wgmma kernel's TMA map needs its extent).
// `lse` (optional, [tokens, heads]): also the log-sum-exp of each token's scaled scores, -inf (and
// o_lat 0) for a token that sees no position (pos -1: a rank of a sharded cache).
// `how`: mla_decode_launch's choices.
void launch_mla_attend(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                       const TokenInfo* info, const int32_t* tables, const KvCacheArg& cache, int64_t cache_pages,
                       int64_t page, int64_t splits, float scale, float* o_lat, float* scratch, MlaKernel kernel,
                       cudaStream_t s, float* lse = nullptr, const MlaDecodeLaunch& how = {});
// The cluster size the KV-major kernel runs `splits` context splits in, under `how`: the largest
// power of two up to how.cluster that divides `splits` (1: no clusters).
int mla_decode_cluster(const MlaDecodeLaunch& how, int64_t splits);
// lse[t, h] = m + log l of one split's partials (m, l) [tokens, heads, 2].
void launch_mla_lse_from_partials(const float* ml_part, int64_t tokens, int64_t heads, float* lse, cudaStream_t s);
// Ops::mla_rank_weigh: o_lat [tokens, heads, latent] *= exp(lse - log Σ_r exp(lse_all[:, r · heads + h])).
void launch_mla_rank_weigh(float* o_lat, const float* lse, const float* lse_all, int64_t tokens, int64_t heads,
                           int64_t ranks, int64_t latent, cudaStream_t s);
// attention/sm80_mma_heads.cu: writes the per-split partials that launch_mla_attend then combines.
void launch_mla_attend_mma_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                                    const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache,
                                    int64_t page, int64_t splits, float scale, float* o_part, float* ml_part,
                                    cudaStream_t s);
// attention/sm80_kv_major.cu: positions as the MMA M dimension, 8 or 16 heads as N (no padding rows at 8
// heads per GPU), cp.async double buffering, ldmatrix. Shapes: latent 512 + rope 64, and 64 + 16.
// An fp8 cache streams its bytes through a staging buffer and is converted to bf16 in shared memory.
bool mla_attend_kv_major_supported(int64_t latent, int64_t rope);
// Dynamic shared memory of the instance for these shapes and cache format (bytes).
int64_t mla_kv_major_smem_bytes(int64_t heads, int64_t latent, int64_t rope, bool fp8);
void launch_mla_attend_kv_major_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent,
                                         int64_t rope, const TokenInfo* info, const int32_t* tables,
                                         const KvCacheArg& cache, int64_t page, int64_t splits, float scale,
                                         float* o_part, float* ml_part, const MlaDecodeLaunch& how, cudaStream_t s);
// attention/sm90_wgmma.cu: Hopper warpgroup MMA (sm_90a only), 64 heads a block as the wgmma M, cache
// tiles of 64 positions in two stages (TMA for pages of a multiple of 64 positions, else cp.async).
// Shapes: latent 512 + rope 64, heads a multiple of 64.
// Callers also need a device of compute capability exactly 9.0 and a binary with sm_90a code
// (kernel_registry.h: mla_wgmma_available).
bool mla_attend_wgmma_supported(int64_t latent, int64_t rope, int64_t heads);
int64_t mla_wgmma_smem_bytes();
// `cache_pages` (pages in `cache`) bounds the TMA tensor map over it. `early`: MlaDecodeLaunch's
// wgmma_early (the first tiles of rows before each token's position are copied before the PDL wait);
// `pairs` its wgmma_pairs (`splits` parts of two blocks each).
void launch_mla_attend_wgmma_partials(const float* q_full, int64_t tokens, int64_t heads, int64_t latent, int64_t rope,
                                      const TokenInfo* info, const int32_t* tables, const __nv_bfloat16* cache,
                                      int64_t cache_pages, int64_t page, int64_t splits, float scale, float* o_part,
                                      float* ml_part, bool early, bool pairs, cudaStream_t s);
int64_t mla_attend_scratch_floats(int64_t tokens, int64_t heads, int64_t latent, int64_t max_splits);
// out[t, h * v + j] = W_UV[h, j] · o_lat[t, h], o_lat's rows o_lat_row floats apart.
void launch_mla_up_v(const float* o_lat, int64_t o_lat_row, int64_t tokens, int64_t heads, int64_t latent,
                     const __nv_bfloat16* kv_b, int64_t nope, int64_t v, float* out, cudaStream_t s);

// --- ../runtime/launch.cpp ---
// An optimisation's off switch for A/B measurements (TESSERA_PDL, TESSERA_GEMV_LOOP,
// TESSERA_SHARED_EXPERT_STREAM): on unless the environment variable `name` is "0". Callers read
// it once.
bool ab_switch_on(const char* name);
// TESSERA_EXPERT_PREFETCH: K blocks ahead that the quantized MMA kernels ask L2 for (0, the default:
// none; an experiment, quant/grouped_mma.cu). Read once; throws core::Error naming the variable for
// a value that is not a number from 0 to 64.
int expert_prefetch_blocks();
// Tiles of 16 pairs the bf16 grouped expert kernels multiply by each weight fragment they stream
// (moe/grouped.cu), for a step of `pairs` (token, expert) pairs over `experts` routed experts: 2
// where an expert averages more than 8 pairs, else 1; TESSERA_MOE_GROUPED_TILES=1|2|4 forces a
// count (read once; throws core::Error naming the variable for another value).
int moe_grouped_tiles(int64_t pairs, int64_t experts);
// TESSERA_MOE_GROUPED_WA (default 1; 0 for A/B): the bf16 routed experts' tensor-core projections
// with the weights as the MMA's A operand (moe/grouped_wa.cu), else the activations (grouped.cu's
// expert_project_kernel). Read once.
bool moe_grouped_weights_a();
// TESSERA_MOE_GROUPED_WA_THREE_BLOCKS (default 0; an experiment, moe/grouped_wa.cu): those kernels'
// registers capped for 3 blocks an SM. Read once.
bool moe_grouped_wa_three_blocks();
// TESSERA_MOE_GROUPED_WA_PAIR_GROUPS (default 1; 0 for A/B; moe/grouped_wa.cu): an expert's passes
// of 32 pairs in parallel blocks where the step averages more than one an expert. Read once.
bool moe_grouped_wa_pair_groups();
// TESSERA_EXPERT_RING (default 1; 0 for A/B): quantized routed experts on the ring kernels
// (quant/grouped_ring.cu) where the GPU and shapes allow. Read once.
bool expert_ring_enabled();
// TESSERA_LINEAR_RING (default 1; 0 for A/B): dense quantized projections on the ring kernel
// (quant/linear_ring.cu) where the GPU, the step (kLinearRingMinTokens) and the matrix
// (kLinearRingMinRows) allow. Read once.
bool linear_ring_enabled();
// TESSERA_EXPERT_EARLY_DOWN (default 1; 0 for A/B): the quantized routed experts' down kernels
// (register streaming and ring) read their routing and first weights before their PDL wait and wait
// only before the activations. Read once.
bool expert_early_down();
// TESSERA_EXPERT_WEIGHTS_A (default 1; 0 for A/B): the quantized expert kernels (ring and register
// streaming) put the weights in the MMA's A operand (quant_mma::k_block_dot_wa) instead of the
// activations. Read once.
bool expert_weights_a();
// TESSERA_STREAM_PRIORITIES (default 0; an experiment): the backend's stream runs at the device's
// highest priority, above the second stream (the shared expert beside the router), and step graphs
// keep the priorities their kernels were captured with. Read once.
bool stream_priorities();

// --- moe/router.cu ---
// Router logits[t, e] = x[t] · W[e] (fp32 accumulate over bf16 weights and fp32 activations).
// Steps of at most this many tokens compute them with launch_router_fused; more go through two
// bf16 GEMMs over the hi and lo parts of x (fp32 products of the bf16 weights).
constexpr int64_t kRouterKernelMaxTokens = 8;
// Logits and selection in one launch for steps of at most kRouterKernelMaxTokens tokens: the last block to finish
// its logits selects. done_blocks: a device counter that is 0 between calls (the kernel resets it).
void launch_router_fused(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* w, int64_t experts,
                         float* logits, const float* bias, int64_t top_k, int64_t groups, int64_t top_groups,
                         bool normalize, float scaling, int32_t* ids, float* weights, unsigned* done_blocks,
                         cudaStream_t s);
// Sigmoid, bias for selection, group-limited top-k, normalisation, scaling (spec §3.1).
void launch_router_select(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k,
                          int64_t groups, int64_t top_groups, bool normalize, float scaling, int32_t* ids,
                          float* weights, cudaStream_t s);

// --- moe/grouped.cu ---
// Device buffers of one grouped-experts call: offsets [experts + 1], active [experts],
// num_active [1], sorted [pairs] (I32); act [pairs, inter] bf16; y [pairs, hidden] fp32.
// The (token, slot) pairs of a step: slots [0, top_k) from the router's ids/weights [tokens, top_k];
// with extra_id >= 0 one more slot per token (extra_id, weight 1): the shared expert, so that its
// weights are read in the same kernels as the routed ones. Pair p = t * per_token() + k.
struct MoeSlots {
  const int32_t* ids;
  const float* weights;
  int top_k;
  int extra_id;  // -1: none
  // [experts] 1 where this rank holds the routed expert, 0 where another tensor-parallel rank does
  // (its pairs are dropped: no expert work, nothing added); null: every expert is held.
  const uint8_t* held = nullptr;
  __host__ __device__ int per_token() const { return top_k + (extra_id >= 0 ? 1 : 0); }
  // Whether pair id `id` is computed here: an expert of the table (`experts` entries, the extra
  // slot's included) that this rank holds.
  __device__ bool computed(int id, int experts) const {
    return id >= 0 && id < experts && (held == nullptr || id == extra_id || held[id] != 0);
  }
  __device__ int id(int pair) const {
    const int K = per_token(), t = pair / K, k = pair % K;
    return k < top_k ? ids[t * top_k + k] : extra_id;
  }
  __device__ float weight(int pair) const {
    const int K = per_token(), t = pair / K, k = pair % K;
    return k < top_k ? weights[t * top_k + k] : 1.0f;
  }
};
inline void add_fields(Signature& s, const MoeSlots& a) {
  static_assert(sizeof(MoeSlots) == 32, "a field was added: add it to the signature");
  s.add(a.ids);
  s.add(a.weights);
  s.add(a.top_k);
  s.add(a.extra_id);
  s.add(a.held);
}
struct MoeGroupedScratch {
  __nv_bfloat16* xb;  // [tokens, hidden]: x rounded to bf16
  int32_t* offsets;
  int32_t* active;
  int32_t* num_active;
  int32_t* sorted;
  __nv_bfloat16* act;
  float* y;
  float* gate_up_part;  // [2 (gate, up), splits, pairs, inter] fp32 partial sums
  // [pairs]: where launch_moe_prepare sorted each pair (its row in scratch.y when the experts
  // write y in sorted order), 0 for pairs it dropped; null: not written.
  int32_t* pair_row = nullptr;
};
// Slices of the hidden dimension the gate/up kernel splits into for `pairs` (token, expert) pairs.
int64_t moe_grouped_gate_up_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter);
// --- moe/grouped_wa.cu --- (launch_moe_grouped_experts calls these when moe_grouped_weights_a())
// The weights-as-A gate/up projections' K slices for a step: 1 where there are blocks enough
// without a split (then they write scratch.act themselves), else moe_grouped_gate_up_splits'.
int64_t moe_wa_gate_up_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter, int64_t expert_slots);
// The pair groups of a step (grid z): the passes of 32 pairs an expert averages over expert_slots,
// 1 to 8; 1 with TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0.
unsigned moe_wa_pair_groups(int64_t pairs, unsigned expert_slots);
// Gate/up of the experts with at least min_pairs pairs: scratch.act (splits 1), else fp32 partial
// sums in scratch.gate_up_part for the finish kernel. Down: scratch.y.
void launch_moe_wa_gate_up(const __nv_bfloat16* x, int64_t hidden, int64_t top_k, const MoeGroupedScratch& scratch,
                           unsigned expert_slots, int min_pairs, int64_t splits, const __nv_bfloat16* const* gate_w,
                           const __nv_bfloat16* const* up_w, int64_t inter, int64_t pairs, cudaStream_t s);
void launch_moe_wa_down(int64_t hidden, int64_t top_k, const MoeGroupedScratch& scratch, unsigned expert_slots,
                        int min_pairs, const __nv_bfloat16* const* down_w, int64_t inter, int64_t pairs,
                        cudaStream_t s);
// The K slices of launch_moe_grouped_experts' gate/up projections for a step over `experts` routed
// experts (with the weights as A: moe_wa_gate_up_splits; else moe_grouped_gate_up_splits):
// scratch.gate_up_part holds 2 x that many [pairs, inter] fp32 slices (read only where it is over 1).
int64_t moe_grouped_part_splits(int64_t tokens, int64_t pairs, int64_t hidden, int64_t inter, int64_t experts);
// Shapes the grouped kernels take (16-byte loads over 32-wide K chunks; one block sorts the pairs).
bool moe_grouped_supported(int64_t hidden, int64_t inter, int64_t experts);
// scratch.y[p] = Expert_{id(p)}(x[token of p]) for every pair p of the step's slots, with no host
// round trip: x [tokens, hidden] fp32 (rounded to bf16 into scratch.xb); gate_w/up_w [experts] →
// [inter, hidden], down_w [experts] → [hidden, inter] (device arrays of device pointers, bf16).
// With one slot per token (top_k 0, extra_id 0) scratch.y is [tokens, hidden]: one expert's output.
void launch_moe_grouped_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                                const __nv_bfloat16* const* gate_w, const __nv_bfloat16* const* up_w,
                                const __nv_bfloat16* const* down_w, int64_t inter, const MoeGroupedScratch& scratch,
                                cudaStream_t s);
// out[t] = Σ_k weights[t, k] · y[pair (t, k)] in slot order, then + add[t] when add is given
// (y: scratch.y of launch_moe_grouped_experts; add [tokens, hidden] or null). With pair_row, pair
// p's row of y is pair_row[p] (y in the sorted order: scratch.pair_row), else p.
void launch_moe_combine(const float* y, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                        const float* add, float* out, cudaStream_t s, const int32_t* pair_row = nullptr);

// --- linear/gemv.cu ---
// Steps of at most this many tokens run dense projections as matrix-vector kernels.
constexpr int64_t kGemvMaxTokens = 2;
// One batch b of `tokens` rows: x (fp32) at x + b * x_batch + t * x_row; W (bf16) at
// w + b * w_batch, row i at + i * w_row; out (fp32) at out + b * out_batch + t * out_row.
struct GemvArgs {
  const float* x;
  int64_t x_row, x_batch;
  const __nv_bfloat16* w;
  int64_t w_row, w_batch;
  float* out;
  int64_t out_row, out_batch;
  int k, n, tokens;
  // Optional, batch 1 only: a second matrix of n2 rows over the same x, written to out2 (one
  // launch for two projections of one input).
  const __nv_bfloat16* w2 = nullptr;
  int64_t w2_row = 0;
  float* out2 = nullptr;
  int64_t out2_row = 0;
  int n2 = 0;
  // Optional: x is RMS-normalised over its k columns with this weight first (fp32, k values;
  // k <= kGemvNormMaxK), as launch_rms_norm computes it.
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
  // Optional, gemv_transposed only: x's columns [k, k + pass_through) are copied to out's columns
  // [n, n + pass_through) (MLA's q_pe beside the absorbed q_nope, without a memcpy between kernels).
  int pass_through = 0;
};
inline void add_fields(Signature& s, const GemvArgs& g) {
  static_assert(sizeof(GemvArgs) == 144, "a field was added: add it to the signature");
  for (const void* p :
       {static_cast<const void*>(g.x), static_cast<const void*>(g.w), static_cast<const void*>(g.out),
        static_cast<const void*>(g.w2), static_cast<const void*>(g.out2), static_cast<const void*>(g.norm_weight)})
    s.add(p);
  for (int64_t v : {g.x_row, g.x_batch, g.w_row, g.w_batch, g.out_row, g.out_batch, g.w2_row, g.out2_row, int64_t{g.k},
                    int64_t{g.n}, int64_t{g.tokens}, int64_t{g.n2}, int64_t{g.pass_through}})
    s.add(v);
  s.add(g.norm_eps);
}
constexpr int64_t kGemvNormMaxK = 4096;
// out[t, i] = Σ_c x[t, c] · W[i, c] for i < n, c < k (k a multiple of 256, n of 4).
bool gemv_applies(int64_t tokens, int64_t k, int64_t n);
// The K split (warps sharing a row group: 1, 2, 4 or 8) launch_gemv picks for these arguments.
int gemv_slices(const GemvArgs& g, int64_t batch, int num_sms);
// slices <= 0: gemv_slices' choice (the benchmark passes others to compare).
void launch_gemv(const GemvArgs& g, int64_t batch, int num_sms, cudaStream_t s, int slices = 0);
// out[t, l] = Σ_i x[t, i] · W[i, l] for l < n, i < k (n a multiple of 256).
bool gemv_transposed_applies(int64_t tokens, int64_t n_cols);
void launch_gemv_transposed(const GemvArgs& g, int64_t batch, cudaStream_t s);

// --- moe/gemv.cu ---
// Experts with at most this many (token, slot) pairs run as matrix-vector kernels when the shapes
// allow (hidden and moe_intermediate multiples of 256).
constexpr int kMoeGemvMaxPairs = 4;
bool moe_gemv_supported(int64_t hidden, int64_t inter);
// Over the pairs permuted into `scratch`, for the experts with at most max_pairs pairs:
// gate/up writes scratch.act = silu(x·Wgᵀ)·(x·Wuᵀ) directly, down writes scratch.y.
// expert_slots = the grid's expert dimension (at least the number of active experts).
void launch_moe_gemv_gate_up(const __nv_bfloat16* x, int64_t hidden, int64_t top_k, const MoeGroupedScratch& scratch,
                             unsigned expert_slots, int max_pairs, const __nv_bfloat16* const* gate_w,
                             const __nv_bfloat16* const* up_w, int64_t inter, cudaStream_t s);
void launch_moe_gemv_down(int64_t hidden, int64_t top_k, const MoeGroupedScratch& scratch, unsigned expert_slots,
                          int max_pairs, const __nv_bfloat16* const* down_w, int64_t inter, cudaStream_t s);

// --- quant/*.cu ---
// Weight matrices in their checkpoint format on the device (ops/linear_weight.h): DeepSeek FP8
// block (e4m3 bytes [n, k], fp32 scales [ceil(n / block_rows), ceil(k / block_cols)]) and ModelOpt
// NVFP4 (e2m1 codes [n, k / 2], first value in the low nibble; e4m3 scales [n, k / 16]; a global
// fp32 scale).
enum class QuantFormat : int32_t { kFp8Block = 1, kNvfp4 = 2 };
struct QuantMatrix {
  const uint8_t* data = nullptr;
  const void* scale = nullptr;
  float global_scale = 1.0f;  // NVFP4 weight_scale_2; 1 for FP8
  QuantFormat format = QuantFormat::kFp8Block;
  int32_t n = 0, k = 0;
  int32_t scale_cols = 0;                      // scales per row of the scale tensor
  int32_t block_rows = 128, block_cols = 128;  // FP8
};
// Every field equal: the same weight as far as a kernel can tell.
inline bool same_matrix(const QuantMatrix& a, const QuantMatrix& b) {
  static_assert(sizeof(QuantMatrix) == 48, "a field was added: compare it here");
  return a.data == b.data && a.scale == b.scale && a.global_scale == b.global_scale && a.format == b.format &&
         a.n == b.n && a.k == b.k && a.scale_cols == b.scale_cols && a.block_rows == b.block_rows &&
         a.block_cols == b.block_cols;
}
inline void add_fields(Signature& s, const QuantMatrix& m) {
  static_assert(sizeof(QuantMatrix) == 48, "a field was added: add it to the signature");
  s.add(m.data);
  s.add(m.scale);
  s.add(m.global_scale);
  s.add(static_cast<int32_t>(m.format));
  for (int32_t v : {m.n, m.k, m.scale_cols, m.block_rows, m.block_cols}) s.add(v);
}
// out [n, k] = bf16(exact dequantized value) (what the host did at load before weights stayed
// quantized): for GEMMs over many tokens and for the ops that read bf16 weights.
void launch_dequant_bf16(const QuantMatrix& w, __nv_bfloat16* out, cudaStream_t s);
// NVFP4 codes (`bytes`, a multiple of 4, 4-byte aligned) from the checkpoint's packing into the
// device layout every NVFP4 kernel decodes (quant/mma_pairs.h, quant/device_layout.cu); src may be
// dst.
void launch_nvfp4_device_layout(const uint8_t* src, uint8_t* dst, int64_t bytes, cudaStream_t s);
// The most tokens launch_quant_gemv takes.
constexpr int64_t kQuantGemvMaxTokens = 8;
// Steps of at most this many tokens run quantized projections as matrix-vector kernels; larger
// ones dequantize to bf16 for one cuBLASLt GEMM. The matrix-vector kernel's time grows with every
// token while the GEMM's is flat, so the limit is where they cross, measured on the H200 on the
// real shapes (bench kernels --cases deepseek-v3,kimi-k2.5 --filter linear, docs/PERFORMANCE.md):
// NVFP4 expert gate/down cross between 4 and 5 tokens; FP8 q_a at 5, o_proj between 6 and 7,
// q_b at 8 and kv_a past 8, and the four summed between 6 and 7.
constexpr int64_t quant_gemv_max_tokens(QuantFormat f) { return f == QuantFormat::kNvfp4 ? 4 : 6; }
// Shapes the quantized matrix-vector kernels take: k a multiple of 32 (NVFP4) or 16 (FP8, and
// block_cols a multiple of 16), n a multiple of 4.
bool quant_gemv_supported(const QuantMatrix& w);
// out [tokens, n] = x [tokens, k] · Wᵀ (x fp32, rows x_row apart), tokens <= kQuantGemvMaxTokens;
// with w2 (one token), also out2 [1, w2->n] = x · W2ᵀ in the same launch (quant_gemv_pair_supported).
// slices <= 0: quant_gemv_slices' choice (the benchmark passes 1, 2, 4 or 8 to compare).
void launch_quant_gemv(const QuantMatrix& w, const float* x, int64_t x_row, int64_t tokens, float* out, int num_sms,
                       cudaStream_t s, const QuantMatrix* w2 = nullptr, float* out2 = nullptr, int slices = 0);
// The K split (warps sharing a group of 4 rows: 1, 2, 4 or 8) launch_quant_gemv picks for `rows`
// output rows (both matrices' of a pair).
int quant_gemv_slices(int64_t rows, int num_sms);
// Whether two matrices can share one launch_quant_gemv (w2, out2 = x · W2ᵀ [tokens, w2.n]): both
// supported, one format, one width and, for FP8, one block width.
bool quant_gemv_pair_supported(const QuantMatrix& a, const QuantMatrix& b);
// out [tokens, n] = x [tokens, k] · Wᵀ on tensor cores (quant/grouped_mma.cu), x given as x_hi + x_lo
// (launch_f32_to_bf16_split: not rounded), tiles of 8 tokens, K split among warps for short
// matrices; tokens <= kQuantMmaMaxTokens: at 16 tokens it ties with dequantizing for a cuBLASLt
// GEMM on the FP8 o_proj and wins on the smaller projections (docs/PERFORMANCE.md); beyond, each
// tile decodes the weights again. Shapes as moe_quant_mma_supported's.
constexpr int64_t kQuantMmaMaxTokens = 16;
bool quant_linear_mma_supported(const QuantMatrix& w);
void launch_quant_linear_mma(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo, int64_t tokens,
                             float* out, int num_sms, cudaStream_t s);
// The same on sm_90a with the weights streamed through a shared-memory ring by TMA and K split over
// the blocks of a cluster, which add their sums in slice order (quant/linear_ring.cu); tokens
// 1-kQuantMmaMaxTokens. False (nothing launched) where the weight's tensor maps cannot be made.
// Shapes as quant_linear_ring_supported says. Chosen (cuda/linear.cpp) for matrices of at least
// kLinearRingMinRows outputs: on an H200 (docs/PERFORMANCE.md) it beat the matrix-vector and MMA
// kernels on DeepSeek-V3's q_b (24576 rows) and o_proj (7168) and Kimi's expert down (7168) by up
// to 2.5x, and lost on q_a (1536), kv_a (576) and the expert gate (2048) up to 8 tokens by 20-45%:
// a narrow matrix has too few 128-row boxes to fill the GPU without a deep K split, whose cluster
// start and reduction cost more than the ring saves. And for steps of at least kLinearRingMinTokens:
// at one token, inside a decode step's graph, the matrix-vector kernel won end to end (FP8 batch 1
// 1.331 against 1.353 ms a 3-layer step) though the ring won the kernel cases, timed alone.
constexpr int64_t kLinearRingMinRows = 4096;
constexpr int64_t kLinearRingMinTokens = 2;
bool quant_linear_ring_supported(const QuantMatrix& w);
bool launch_quant_linear_ring(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo,
                              int64_t tokens, float* out, int num_sms, cudaStream_t s);
// The routed experts of launch_moe_grouped_experts with quantized weights (tables of QuantMatrix
// [experts] on the device, one format): the pairs sorted by expert into `scratch`, then
// matrix-vector kernels over each expert's pairs with fp32 activations (gate/up write act
// [pairs, inter] fp32, down scratch.y; scratch.act and gate_up_part are not used).
bool moe_quant_supported(const QuantMatrix& gate, const QuantMatrix& down, int64_t experts);
void launch_moe_quant_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                              QuantFormat format, const QuantMatrix* gate_w, const QuantMatrix* up_w,
                              const QuantMatrix* down_w, int64_t inter, float* act, const MoeGroupedScratch& scratch,
                              cudaStream_t s);
// The same on tensor cores (quant/grouped_mma.cu), NVFP4 or FP8 block: 16 pairs an MMA tile,
// scratch.act bf16 [pairs, inter]. Shapes: k a multiple of 128 and n of 8 for both matrices (FP8:
// 128-column scale blocks of a multiple of 8 rows).
bool moe_quant_mma_supported(const QuantMatrix& gate, const QuantMatrix& down);
void launch_moe_quant_mma_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots,
                                  int64_t experts, QuantFormat format, const QuantMatrix* gate_w,
                                  const QuantMatrix* up_w, const QuantMatrix* down_w, int64_t inter,
                                  const MoeGroupedScratch& scratch, cudaStream_t s);
// The same with the weights streamed through a shared-memory ring a producer warp fills by TMA
// (quant/grouped_ring.cu; NVFP4 and FP8 block, sm_90a; cuda/moe.cpp chooses it): `maps`
// holds kRingTensorMapBytes-byte tensor maps [matrix (gate, up, down)][codes, scales][expert], made
// by encode_ring_maps (quant/ring_maps.h; cuda/moe.cpp; FP8 has no scale maps: its block scales are
// read from global memory). Shapes as moe_quant_ring_supported says.
constexpr int kRingTensorMapBytes = 128;  // sizeof(CUtensorMap)
bool moe_quant_ring_supported(const QuantMatrix& gate, const QuantMatrix& down);
void launch_moe_quant_ring_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots,
                                   int64_t experts, QuantFormat format, const QuantMatrix* gate_w,
                                   const QuantMatrix* up_w, const QuantMatrix* down_w, const uint8_t* maps,
                                   int64_t inter, const MoeGroupedScratch& scratch, cudaStream_t s);
// grouped.cu's first kernel: the pairs sorted by expert (scratch.offsets, active, num_active,
// sorted, and pair_row where given) and x rounded to bf16 (scratch.xb; skipped where it is null).
void launch_moe_prepare(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                        const MoeGroupedScratch& scratch, cudaStream_t s);

}  // namespace tessera::ops::cuda
