// The op contract the model is written against. Each backend (cpu/, cuda/) implements it;
// the model code is the same for all of them. Shapes are row-major; T = tokens in the step.
// Activations are backend-chosen float tensors (fp32 on the CPU reference backend).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "ops/linear_weight.h"
#include "ops/sampling_rule.h"

namespace tessera::ops {

// Per-position rotary tables for the tokens of one step: cos/sin [T, rope_dim/2], already
// multiplied by the YaRN attention factor.
struct RopeTables {
  core::Tensor cos;
  core::Tensor sin;
};

// One latent-KV cache layer: [num_pages, page_size, entry_dim] with entry = [c_kv | k_pe].
//
// Element formats (pages.dtype()): F32 (CPU), BF16 (CUDA), or U8 holding float8 e4m3fn bytes
// (KvCacheDtype::kFp8E4M3, both backends). An fp8 cache stores each element x of an entry as
//   q = sat_e4m3_rne(x / scale)   (round to nearest even; |x / scale| beyond 448 saturates to ±448,
//                                  so no NaN is ever made from a number; core::f32_to_fp8_e4m3)
// and every reader uses q · scale (fp32 product). `scale` is one fp32 value per layer: MLA caches a
// single latent that serves as both K and V, so it is the checkpoint's k_scale for the layer (as
// vLLM's concat_and_cache_mla uses layer._k_scale), or 1.0 when the checkpoint has none. Caches
// of other element types ignore it (it stays 1.0).
struct KvLayerView {
  core::Tensor pages;
  int64_t page_size = 64;
  float scale = 1.0f;
};

// Where one sequence's new tokens sit in the flat step and in the cache.
struct AttentionSeq {
  int64_t token_begin = 0;               // row of its first new token in the flat [T, ...] tensors
  int64_t num_tokens = 0;                // new tokens
  int64_t start_pos = 0;                 // tokens already cached before this step
  std::span<const int32_t> block_table;  // cache pages covering positions [0, start_pos + num_tokens)
};

struct MlaDims {
  int64_t heads = 0, nope = 0, rope = 0, v = 0, latent = 0;
  float scale = 1.0f;
};

struct RouterConfig {
  int64_t experts = 0, top_k = 0, groups = 1, top_groups = 1;
  bool normalize = true;
  float scaling = 1.0f;
};

// What the model does with a linear, which a backend may need to choose how to hold it: most are
// projections (Ops::linear and the MoE ops); kv_b is also read inside MLA attention and the router
// by moe_route.
enum class LinearUse { kProjection, kAttentionKvB, kRouter };

struct ExpertWeights {
  LinearWeight gate, up, down;
  // False for a routed expert another tensor-parallel rank holds (no weights here): the MoE ops add
  // nothing for the tokens routed to it, and that rank adds its part in the all-reduce.
  bool held() const { return gate.out > 0; }
};

// --- What a backend will run for a model, decided before any weight is read (`tessera plan`
// prints it; the engine runs exactly it).

// One line of the plan: the kernel an op runs, why, and whether it can run at all.
struct KernelChoice {
  // A constructor rather than an aggregate, so that the many {op, kernel, reason, available} lines
  // need not spell out `alternatives` (-Wmissing-field-initializers).
  KernelChoice() = default;
  KernelChoice(std::string op_, std::string kernel_, std::string reason_, bool available_ = true,
               std::vector<std::string> alternatives_ = {})
      : op(std::move(op_)),
        kernel(std::move(kernel_)),
        reason(std::move(reason_)),
        available(available_),
        alternatives(std::move(alternatives_)) {}

  std::string op;
  std::string kernel;
  std::string reason;
  bool available = true;  // false: nothing can run this op here (the plan fails before loading)
  // The --kernels entries that make this op run another kernel that can run here (e.g.
  // "mla=kv-major"): what the start-up self-check suggests when this kernel disagrees with the CPU
  // reference. Empty: no choice (the op has one kernel).
  std::vector<std::string> alternatives;
};

// The model's linears of one group and checkpoint format, counted on the checkpoint's headers (no
// weight data read): what a backend's plan turns into device bytes and a line on how it computes.
// The group of the routed experts' linears, which backends plan on their own (their kernels, tables).
inline constexpr const char* kRoutedExpertsGroup = "routed experts";
// The shared experts' linears (which a backend may run inside the routed experts' kernels).
inline constexpr const char* kSharedExpertsGroup = "shared experts";
struct WeightGroup {
  std::string name;  // kRoutedExpertsGroup, "attention", ...
  LinearUse use = LinearUse::kProjection;
  LinearWeight::Format format = LinearWeight::Format::kDense;
  std::string format_name;  // LinearWeight::format_name(): "bf16", "fp8-block128x128", "nvfp4-g16"
  uint64_t linears = 0, params = 0, stored_bytes = 0;
  int64_t min_in = 0;  // the narrowest input width among them (a backend's kernels may need alignment)
};

struct BackendPlan {
  std::string device;                  // e.g. "cpu (fp32 reference backend)", "NVIDIA H200 (sm_90, ...)"
  std::optional<uint64_t> free_bytes;  // device memory free now; none for a backend in host memory
  uint64_t total_bytes = 0;            // the device's memory (with free_bytes)
  uint64_t weight_bytes = 0;           // what the weights will occupy there once uploaded (0: mapped)
  std::string weight_rule;             // how that was counted
  uint64_t table_bytes = 0;            // kernel tables the backend makes at a layer's first step, after the
                                       // KV pool is sized (CUDA: the routed experts' descriptors, tensor maps)
  std::string table_rule;              // what they are
  std::vector<KernelChoice> kernels;   // every op, in the order `tessera plan` prints them
  std::string decode_steps;            // how decode steps are launched (CUDA graphs or one by one)
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;

  // Device memory free now and what this backend holds there (weights, caches); nullopt for a
  // backend that runs in host memory. The engine sizes the KV pool from it.
  struct DeviceMemory {
    uint64_t free_bytes = 0;
    uint64_t held_bytes = 0;  // resident + activations + graphs
    uint64_t total_bytes = 0;
    uint64_t resident_bytes = 0;    // weights, KV pages
    uint64_t activation_bytes = 0;  // the activation pool: in use and cached
    uint64_t graph_bytes = 0;       // CUDA-graph step memory
  };
  virtual std::optional<DeviceMemory> device_memory() { return std::nullopt; }

  // What this backend will run for `config` with a KV cache of `kv_dtype` and these linears (empty:
  // counted from the config as bf16): the kernel of each op (the backend executes these choices),
  // the device and the bytes the weights will take there.
  virtual BackendPlan plan(const io::ModelConfig& config, core::KvCacheDtype kv_dtype,
                           std::span<const WeightGroup> linears = {}) const = 0;

  // A new activation tensor (fp32 on every backend so far) and a new int32 index tensor. Their
  // contents are unspecified until an op writes them (the CPU backend zeroes them; the CUDA backend
  // does not, which saves a memset and a launch gap per tensor on every layer of a decode step).
  virtual core::Tensor empty(core::Shape shape) = 0;
  virtual core::Tensor empty_i32(core::Shape shape) = 0;

  // Weights are handed to the backend once, at load: it may move them to its memory or change
  // their format (the CUDA backend keeps FP8 and NVFP4 projections in their checkpoint format and
  // computes on them, NVFP4's words bit-permuted; what attention or the router read it may convert,
  // see LinearUse). A tensor already in the backend's memory is taken over: it may be changed in
  // place. The CPU backend uses the mapped checkpoint as it is.
  virtual LinearWeight upload_linear(const LinearWeight& w, LinearUse use = LinearUse::kProjection) {
    (void)use;
    return w;
  }
  // Whether upload_* copy the weights somewhere else (a device): then the loader reads the
  // checkpoint with many threads into staging_host_buffer() memory ahead of the uploads and hands
  // them views of it, valid only during the call. Otherwise uploads get views of the mapped
  // checkpoint, which live as long as the model.
  virtual bool uploads_copy_weights() const { return false; }
  // Host memory of `bytes` for that staging (pinned on a GPU backend, so its copies are DMA).
  virtual std::shared_ptr<void> staging_host_buffer(size_t bytes) {
    return std::shared_ptr<void>(::operator new(bytes), [](void* p) { ::operator delete(p); });
  }
  // Small float vectors (norm weights, router bias): any float dtype in, backend's choice out.
  virtual core::Tensor upload_vector(const core::Tensor& t) { return t; }
  // The embedding table [vocab, hidden].
  virtual core::Tensor upload_table(const core::Tensor& t) { return t; }
  // KV-cache element types this backend can store, and its default.
  virtual std::vector<core::KvCacheDtype> supported_kv_dtypes() const = 0;
  virtual core::KvCacheDtype default_kv_dtype() const = 0;
  // Zeroed storage for one layer of KV pages [pages, page_size, entry_dim] of `dtype` (fp8: U8
  // bytes, see KvLayerView).
  virtual core::Tensor empty_kv_pages(core::Shape shape, core::KvCacheDtype dtype) = 0;
  // A new activation tensor holding `data` (host fp32, shape_numel(shape) values).
  virtual core::Tensor from_host_f32(core::Shape shape, const float* data) = 0;

  // out[t] = table[ids[t]]; table [V, H] in any float dtype; throws naming the id if out of range.
  virtual void embedding(const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out) = 0;
  // out = x · rsqrt(mean(x²) + eps) · weight over columns [col_begin, col_begin + d) of x,
  // d = weight.numel(). `out` is either [T, d] or as wide as x (then the same columns are written,
  // which allows normalising part of a row in place).
  virtual void rms_norm(const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
                        int64_t col_begin = 0) = 0;
  // out = x · Wᵀ, x [T, in], out [T, out].
  virtual void linear(const core::Tensor& x, const LinearWeight& w, core::Tensor& out) = 0;
  // out1 = x · W1ᵀ and out2 = x · W2ᵀ: two projections of the same input (an attention layer's
  // q_a and kv_a), which a backend may run as one kernel. The result must equal two linear calls.
  virtual void linear_pair(const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1, const LinearWeight& w2,
                           core::Tensor& out2) {
    linear(x, w1, out1);
    linear(x, w2, out2);
  }
  // out = rms_norm(x, norm_weight) · Wᵀ over all of x's columns: the q_a norm in front of q_b, which a
  // backend may fold into the projection. The result must equal the two ops in sequence.
  virtual void rms_norm_linear(const core::Tensor& x, const core::Tensor& norm_weight, float eps, const LinearWeight& w,
                               core::Tensor& out) {
    core::Tensor normed = empty(x.shape());
    rms_norm(x, norm_weight, eps, normed);
    linear(normed, w, out);
  }
  // x += y
  virtual void add_inplace(core::Tensor& x, const core::Tensor& y) = 0;
  // x += y, then out = rms_norm(x, weight) over all of x's columns: the residual add in front of a
  // layer's norm, which a backend may fuse (the result must equal the two ops in sequence).
  virtual void add_rms_norm(core::Tensor& x, const core::Tensor& y, const core::Tensor& weight, float eps,
                            core::Tensor& out) {
    add_inplace(x, y);
    rms_norm(x, weight, eps, out);
  }
  // out = silu(gate) * up, all [T, I].
  virtual void silu_mul(const core::Tensor& gate, const core::Tensor& up, core::Tensor& out) = 0;

  // Rotates interleaved pairs (x[2i], x[2i+1]) in place by angle i of each token's position, for
  // `count` vectors of width rope_dim per row starting at column `col_begin`, `col_stride` apart.
  virtual void rope_inplace(core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                            int64_t count) = 0;

  // Writes each new token's [c_kv | k_pe] (rows of `latent` [T, entry_dim]) to its cache slot. The
  // tokens of a sequence with an empty block table are not written (in a cache sharded by position,
  // model/kv_shard.h, another rank stores them).
  virtual void kv_cache_write(KvLayerView& cache, const core::Tensor& latent, std::span<const AttentionSeq> seqs) = 0;

  // The rest of an MLA layer's inputs, as these ops in sequence (a backend may run them as one
  // kernel): q's rope columns rotated (rope_inplace(q, tables, nope, nope + rope, heads)); in
  // `latent` [T, latent + rope], the c_kv columns normalised in place by `latent_norm` and the k_pe
  // columns rotated; then the latent written to the cache (kv_cache_write).
  virtual void mla_prepare(core::Tensor& q, core::Tensor& latent, const core::Tensor& latent_norm, float eps,
                           const RopeTables& tables, const MlaDims& dims, KvLayerView& cache,
                           std::span<const AttentionSeq> seqs) {
    rope_inplace(q, tables, dims.nope, dims.nope + dims.rope, dims.heads);
    rms_norm(latent, latent_norm, eps, latent);
    rope_inplace(latent, tables, dims.latent, dims.rope, 1);
    kv_cache_write(cache, latent, seqs);
  }

  // MLA attention for every sequence, causal, over the cache (which already holds the new tokens).
  // q [T, heads, nope + rope] (rope part rotated); out [T, heads * v].
  // Sequences with one new token use the absorbed form over the latent cache (decode); longer ones
  // decompress K/V of the whole context through kv_b (prefill, with any cached prefix).
  virtual void mla_attention(const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                             const MlaDims& dims, std::span<const AttentionSeq> seqs, core::Tensor& out) = 0;

  // --- MLA attention over a KV cache sharded by position across tensor-parallel ranks
  // (model/kv_shard.h): mla_attention's absorbed form in parts, with the model's collectives between
  // them (all-gather the absorbed queries of every head, attend over this rank's positions, weigh
  // each rank's partial by its share of the softmax, all-reduce, up-project this rank's heads).
  //
  // q_full [T, heads, latent + rope] = [q_nope · W_UK | q_pe] per head, q [T, heads, nope + rope]
  // (rope part rotated), W_UK = kv_b's first nope rows of each head (dims.heads heads).
  virtual void mla_absorb_q(const core::Tensor& q, const LinearWeight& kv_b, const MlaDims& dims,
                            core::Tensor& q_full) = 0;
  // For every row t of the step, seqs[t] (one token, token_begin t) says what it sees: cache
  // positions [0, start_pos + 1), none when start_pos is -1. o_lat[t, h] = softmax_s(scale ·
  // q_full[t, h] · cache[s]) · cache[s, :latent] and lse[t, h] = log Σ_s exp(scale · q_full[t, h] ·
  // cache[s]); a token that sees nothing gets o_lat = 0 and lse = -inf. q_full [T, heads, latent +
  // rope], o_lat [T, heads, latent], lse [T, heads]. `decode_step`: every token is its sequence's only
  // new one (a backend may then run less exact, faster kernels, as mla_attention does for decode).
  virtual void mla_attend_latent(const core::Tensor& q_full, const KvLayerView& cache, const MlaDims& dims,
                                 std::span<const AttentionSeq> seqs, bool decode_step, core::Tensor& o_lat,
                                 core::Tensor& lse) = 0;
  // One rank's part of the merge over `ranks` ranks: o_lat[t, h] *= exp(lse[t, h] - L[t, h]) with
  // L[t, h] = log Σ_r exp(lse_all[t, r · heads + h]) (lse_all: every rank's lse side by side, this
  // rank's among them); the ranks' o_lat then sum to the attention over all positions. A rank whose
  // lse is -inf contributes 0. o_lat [T, heads, latent], lse [T, heads], lse_all [T, ranks · heads].
  virtual void mla_rank_weigh(core::Tensor& o_lat, const core::Tensor& lse, const core::Tensor& lse_all) = 0;
  // out[t, h · v + j] = W_UV[h][j] · o_lat[t, head_begin + h] for this rank's dims.heads heads, W_UV =
  // kv_b's last v rows of each head; o_lat [T, any heads >= head_begin + dims.heads, latent].
  virtual void mla_up_v(const core::Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& dims,
                        core::Tensor& out) = 0;

  // Router: sigmoid scores of x · gateᵀ, + bias for selection only, group-limited top-k,
  // normalisation and scaling (spec §3.1). ids [T, top_k] I32, weights [T, top_k] F32.
  virtual void moe_route(const core::Tensor& x, const LinearWeight& gate, const core::Tensor& bias,
                         const RouterConfig& cfg, core::Tensor& ids, core::Tensor& weights) = 0;
  // out[t] = Σ_k weights[t,k] · Expert_{ids[t,k]}(x[t]), then + Shared(x[t]) when `shared` is
  // given (added last; out is overwritten). A backend may run the shared expert beside the routed
  // ones.
  virtual void moe_experts(const core::Tensor& x, const std::vector<ExpertWeights>& experts, const core::Tensor& ids,
                           const core::Tensor& weights, core::Tensor& out, const ExpertWeights* shared = nullptr) = 0;
  // A whole MoE block: moe_route, then moe_experts into out (ids and weights are temporaries). A
  // backend may run the shared expert beside the routing, which it does not depend on. The result
  // must equal the two ops in sequence.
  virtual void moe(const core::Tensor& x, const LinearWeight& router, const core::Tensor& bias, const RouterConfig& cfg,
                   const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, core::Tensor& out) {
    core::Tensor ids = empty_i32({x.dim(0), cfg.top_k}), weights = empty({x.dim(0), cfg.top_k});
    moe_route(x, router, bias, cfg, ids, weights);
    moe_experts(x, experts, ids, weights, out, shared);
  }
  // y = down(silu(x · gateᵀ) * (x · upᵀ)): a dense MLP from the ops above.
  void mlp(const core::Tensor& x, const ExpertWeights& m, core::Tensor& y) {
    const int64_t T = x.dim(0), inter = m.gate.out;
    core::Tensor g = empty({T, inter}), u = empty({T, inter});
    linear(x, m.gate, g);
    linear(x, m.up, u);
    core::Tensor act = empty({T, inter});
    silu_mul(g, u, act);
    linear(act, m.down, y);
  }

  // Runs `step`, the ops of one whole model step, returning its result (the logits). A backend may
  // record the step's launches the first times it sees a key >= 0 and replay them afterwards (CUDA
  // graphs): steps of one key must issue the same ops on tensors of the same shapes, with the same
  // weights (the model passes the token count of decode-only steps, and -1 for steps not to be
  // recorded). The backend checks that a replay would launch what was recorded and runs the step as
  // usual otherwise. The result may live in memory that the next graphed step reuses: read it
  // before then. Within a step, the backend may keep what it derived from the sequences' metadata.
  virtual core::Tensor graphed_step(int64_t key, const std::function<core::Tensor()>& step) {
    (void)key;
    return step();
  }

  // A point between two layers of a step given to graphed_step, where nothing of the step runs
  // beside its main chain: a backend replaying a recorded step may start the work up to here.
  virtual void step_boundary() {}

  // Copies rows `rows` of x into out [rows.size(), cols] (used to pick the positions whose logits
  // are wanted).
  virtual void gather_rows(const core::Tensor& x, std::span<const int64_t> rows, core::Tensor& out) = 0;
  // Draws one token per row of logits [rows.size(), vocab] (F32) into ids_out (I32, rows.size()
  // values) and, when logprob_out is given (F32, rows.size() values), its log-probability under
  // the distribution it was drawn from. Per row, with s = logit · (1/temperature) in fp32:
  //  - temperature 0: greedy, the first (lowest id) argmax; logprob = log-softmax at temperature 1;
  //  - else: order tokens by (s descending, id ascending); keep the first top_k (if on), then of
  //    those the shortest prefix whose mass reaches top_p of the top-k set's mass (if on);
  //    renormalise; return the kept token, in id-ascending order, whose cumulative mass first
  //    exceeds uniform · kept mass. logprob = log of its renormalised probability.
  // This is vLLM's order (top-k, then top-p on the renormalised top-k set) and the engine
  // sampler's draw, so a row gives the host sampler's token for the same uniform. Masses are the
  // fixed-point integers of sampling_rule.h, so every backend returns the same ids bit for bit;
  // the kept set is a prefix of the order, so a GPU finds it by radix selection, without a sort.
  // A row whose logits are all -inf (or NaN) gives token 0 with logprob -inf. Throws core::Error
  // naming the parameter at fault (see sample_args.h).
  virtual void sample(const core::Tensor& logits, std::span<const SampleRow> rows, core::Tensor& ids_out,
                      core::Tensor* logprob_out) = 0;
  // Constrained decoding: sets logits [rows, vocab] (F32) to -inf wherever the token's bit is clear
  // in `bitmask`, a host array of rows x ceil(vocab / 32) words (bit t % 32 of word t / 32 of the
  // row), so that Ops::sample draws only allowed tokens. In place.
  virtual void mask_logits(core::Tensor& logits, std::span<const uint32_t> bitmask) = 0;

  // Copies a device tensor to host fp32 / int32.
  virtual std::vector<float> to_host_f32(const core::Tensor& x) = 0;
  virtual std::vector<int32_t> to_host_i32(const core::Tensor& x) = 0;
  // The bytes of a tensor of any dtype (KV pages: bf16 or fp8 on a GPU), copied to the host.
  virtual std::vector<uint8_t> to_host_bytes(const core::Tensor& x) = 0;
  virtual core::Tensor from_host_i32(core::Shape shape, const int32_t* data) = 0;
};

}  // namespace tessera::ops
