#include "ops/cuda/moe.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "core/env.h"
#include "core/error.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/linear.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/kernels/quant/ring_maps.h"
#include "ops/cuda/weights.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;
using ExpertTable = MoeState::ExpertTable;

MoeState::MoeState(CudaContext& ctx) {
  router_done_blocks = ctx.alloc(DType::kI32, {1});
  TESSERA_CUDA_CHECK(cudaMemset(router_done_blocks.raw(), 0, sizeof(int32_t)));
}

namespace {

// The first routed expert this rank holds: the reference for the format and shape the grouped
// kernels take (a tensor-parallel rank holds a share, the others' entries are empty). Null when it
// holds none.
const ExpertWeights* first_held(const std::vector<ExpertWeights>& experts) {
  for (const ExpertWeights& e : experts)
    if (e.held()) return &e;
  return nullptr;
}

// `shared`, when given, is appended as expert E. Cached per expert list, and checked against the
// weights' current device pointers: a list freed and another allocated at the same address (a
// second model, a test) must not get the old table. Not while a recorded step is replayed: steps
// of one key use the same weights (Ops::graphed_step), and the check reads every expert's weights
// (~10 µs of host time a layer, which a replay's check would add before the graph's launch).
const ExpertTable& expert_table(CudaContext& ctx, MoeState& state, const std::vector<ExpertWeights>& experts,
                                const ExpertWeights* shared) {
  const auto key = std::make_pair(experts.data(), shared);
  if (ctx.replaying()) {
    auto it = state.expert_tables.find(key);
    if (it != state.expert_tables.end()) return it->second.second;
  }
  const size_t E = experts.size() + (shared ? 1 : 0);
  std::vector<const __nv_bfloat16*> host(3 * E);
  for (size_t e = 0; e < E; ++e) {
    const ExpertWeights& w = e < experts.size() ? experts[e] : *shared;
    if (!w.held()) continue;  // another rank's: null, its pairs are dropped (held_mask)
    host[e] = ptr<__nv_bfloat16>(w.gate.weight);
    host[E + e] = ptr<__nv_bfloat16>(w.up.weight);
    host[2 * E + e] = ptr<__nv_bfloat16>(w.down.weight);
  }
  auto it = state.expert_tables.find(key);
  if (it != state.expert_tables.end() && it->second.first == host) return it->second.second;
  ExpertTable t;
  t.storage = ctx.upload_bytes(DType::kU8, {static_cast<int64_t>(host.size() * sizeof(void*))}, host.data());
  auto* base = static_cast<const __nv_bfloat16* const*>(t.storage.raw());
  t.gate = base;
  t.up = base + E;
  t.down = base + 2 * E;
  auto& slot = state.expert_tables[key];
  slot = {std::move(host), std::move(t)};
  return slot.second;
}

// The buffers of one launch_moe_grouped_experts call, held until the work that reads them is queued.
struct GroupedExperts {
  Tensor xb, meta, act, y_rows, part;
  float* y = nullptr;  // y_rows' data: [pairs, hidden]
};
// The pairs of `slots` through experts [first, first + experts) of `table`, on `stream`.
GroupedExperts grouped_experts(CudaContext& ctx, const Tensor& x, const MoeSlots& slots, int64_t experts,
                               const ExpertTable& table, int64_t first, int64_t inter, cudaStream_t stream) {
  const int64_t T = x.dim(0), H = x.dim(1), P = T * slots.per_token();
  GroupedExperts r;
  r.xb = ctx.alloc(DType::kBF16, {T, H});
  r.meta = ctx.alloc(DType::kI32, {2 * experts + 2 + P});
  r.act = ctx.alloc(DType::kBF16, {P, inter});
  r.y_rows = ctx.alloc(DType::kF32, {P, H});
  r.part = ctx.alloc(DType::kF32, {2 * moe_grouped_part_splits(T, P, H, inter, experts) * P * inter});
  int32_t* m = ptr<int32_t>(r.meta);
  const MoeGroupedScratch scratch{ptr<__nv_bfloat16>(r.xb), m,
                                  m + experts + 1,          m + 2 * experts + 1,
                                  m + 2 * experts + 2,      ptr<__nv_bfloat16>(r.act),
                                  ptr<float>(r.y_rows),     ptr<float>(r.part)};
  launch_moe_grouped_experts(ptr<float>(x), T, H, slots, experts, table.gate + first, table.up + first,
                             table.down + first, inter, scratch, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
  r.y = ptr<float>(r.y_rows);
  return r;
}

bool has_routed_shape(const ExpertWeights& e, int64_t hidden, int64_t inter) {
  return e.gate.out == inter && e.up.out == inter && e.down.in == inter && e.gate.in == hidden && e.down.out == hidden;
}

// Whether the grouped kernels take these routed experts for a step of x's tokens: the plan's
// choice (kernel_registry.h), for experts of one shape (the grouped kernels index one table).
bool moe_grouped_applies(CudaContext& ctx, const Tensor& x, const std::vector<ExpertWeights>& experts) {
  const int64_t T = x.dim(0), H = x.dim(1), E = static_cast<int64_t>(experts.size());
  const int64_t inter = first_held(experts)->gate.out;
  if (!ctx.moe_plan({E, H, inter}).grouped_for(T)) return false;
  const bool uniform = std::all_of(experts.begin(), experts.end(),
                                   [&](const ExpertWeights& e) { return !e.held() || has_routed_shape(e, H, inter); });
  TESSERA_CHECK(uniform || ctx.overrides().moe != MoeKernel::kGrouped,
                "MoE kernel 'grouped' was forced but the routed experts do not all have the shape of the first "
                "(hidden {}, moe_intermediate {})",
                H, inter);
  return uniform;
}

// Whether the shared expert can run in the grouped kernels as one more expert of the table.
bool shared_expert_groups_with(const Tensor& x, const std::vector<ExpertWeights>& experts,
                               const ExpertWeights& shared) {
  const int64_t H = x.dim(1), inter = first_held(experts)->gate.out;
  return has_routed_shape(shared, H, inter) &&
         moe_grouped_supported(H, inter, static_cast<int64_t>(experts.size()) + 1);
}

bool shared_expert_stream_enabled() {
  static const bool enabled = ab_switch_on("TESSERA_SHARED_EXPERT_STREAM");
  return enabled;
}

void add_shared_expert(CudaContext& ctx, Ops& ops, const Tensor& x, const ExpertWeights& shared, Tensor& out) {
  Tensor y = ctx.alloc(DType::kF32, {x.dim(0), x.dim(1)});
  ops.mlp(x, shared, y);
  add_inplace(ctx, out, y);
}

// Whether every routed expert is held here: a tensor-parallel rank holds a share, the others'
// entries are empty (ExpertWeights::held()).
bool all_held(const std::vector<ExpertWeights>& experts) {
  return std::all_of(experts.begin(), experts.end(), [](const ExpertWeights& e) { return e.held(); });
}

// MoeSlots::held for `experts`: null when every expert is held, else a flag per expert on the
// device (built once per expert list; a replayed step uses the recorded one).
const uint8_t* held_mask(CudaContext& ctx, MoeState& state, const std::vector<ExpertWeights>& experts) {
  if (all_held(experts)) return nullptr;
  auto& slot = state.held_masks[experts.data()];
  if (ctx.replaying() && slot.second.raw() != nullptr) return static_cast<const uint8_t*>(slot.second.raw());
  std::vector<uint8_t> host(experts.size());
  for (size_t e = 0; e < experts.size(); ++e) host[e] = experts[e].held() ? 1 : 0;
  if (slot.first != host || slot.second.raw() == nullptr)
    slot = {host, ctx.upload_bytes(DType::kU8, {static_cast<int64_t>(host.size())}, host.data())};
  return static_cast<const uint8_t*>(slot.second.raw());
}

// The pairs sorted by expert on the device (launch_moe_prepare), only the experts' pair counts read
// back to the host, then per expert a gather of its tokens' rows and three cuBLASLt GEMMs whose
// output rows land in the step's sorted order, and one combine adding each token's slots (the
// grouped path's, in slot order). Where every projection of the expert is one bf16 GEMM at its
// token count (linear_takes_bf16: dense weights, beyond the matrix-vector kernel; prefill) the
// gather and the activation write bf16 themselves: one read of x's rows for gate and up together, no
// fp32 copies converted before each GEMM (an 8192-token prefill spent 15 of 117 ms converting
// them), the same bits. Against a weighted scatter-add an expert (which read and wrote `out`'s rows
// once an expert: 7.1 ms of that prefill) the combine writes `out` once.
void moe_experts_per_expert(CudaContext& ctx, MoeState& state, const Tensor& x,
                            const std::vector<ExpertWeights>& experts, const Tensor& ids, const Tensor& weights,
                            Tensor& out) {
  const int64_t T = x.dim(0), H = x.dim(1), K = ids.dim(1), E = static_cast<int64_t>(experts.size()), P = T * K;
  const cudaStream_t stream = ctx.stream();
  TESSERA_CHECK(E <= 1024, "moe_experts: {} routed experts; the expert sort takes at most 1024", E);
  const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(K), -1, held_mask(ctx, state, experts)};
  Tensor meta = ctx.alloc(DType::kI32, {2 * E + 2 + 2 * P});
  int32_t* m = ptr<int32_t>(meta);
  MoeGroupedScratch sort{nullptr, m, m + E + 1, m + 2 * E + 1, m + 2 * E + 2, nullptr, nullptr, nullptr};
  sort.pair_row = m + 2 * E + 2 + P;
  launch_moe_prepare(ptr<float>(x), T, H, slots, E, sort, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
  std::vector<int32_t> begin(static_cast<size_t>(E + 1));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(begin.data(), sort.offsets, begin.size() * 4, cudaMemcpyDeviceToHost, stream));
  ctx.sync();
  // y's rows in the sorted order (at least one: the combine reads row 0 for dropped pairs).
  Tensor y = ctx.alloc(DType::kF32, {std::max<int64_t>(begin[static_cast<size_t>(E)], 1), H});
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t n = begin[e + 1] - begin[e];
    if (n == 0) continue;  // no pairs, or another tensor-parallel rank's expert (dropped by the sort)
    const ExpertWeights& w = experts[e];
    const int64_t inter = w.gate.out;
    const int32_t* pairs = sort.sorted + begin[e];
    // The GEMMs' inputs in bf16 where every projection takes them so, else fp32 for linear.
    const bool bf16 = linear_takes_bf16(n, w.gate) && linear_takes_bf16(n, w.up) && linear_takes_bf16(n, w.down);
    const DType in_type = bf16 ? DType::kBF16 : DType::kF32;
    const auto project = [&](const Tensor& in, const LinearWeight& lw, Tensor& o) {
      bf16 ? linear_bf16(ctx, in, lw, o) : linear(ctx, in, lw, o);
    };
    Tensor xin = ctx.alloc(in_type, {n, H});
    if (bf16)
      launch_gather_pair_rows_bf16(ptr<float>(x), H, pairs, static_cast<int>(K), n, ptr<__nv_bfloat16>(xin), stream);
    else
      launch_gather_pair_rows(ptr<float>(x), H, pairs, static_cast<int>(K), n, ptr<float>(xin), stream);
    Tensor g = ctx.alloc(DType::kF32, {n, inter}), u = ctx.alloc(DType::kF32, {n, inter}),
           act = ctx.alloc(in_type, {n, inter});
    project(xin, w.gate, g);
    project(xin, w.up, u);
    if (bf16)
      launch_silu_mul_bf16(ptr<float>(g), ptr<float>(u), ptr<__nv_bfloat16>(act), g.numel(), stream);
    else
      silu_mul(ctx, g, u, act);
    // Straight into y's rows where they start 256-byte aligned (cuBLASLt's algorithms may need it:
    // its default preference), which rows of a multiple of 64 floats always do; else through a copy.
    Tensor y_rows = y.slice_rows(begin[e], begin[e] + n);
    if ((H * 4) % 256 == 0) {
      project(act, w.down, y_rows);
    } else {
      Tensor staged = ctx.alloc(DType::kF32, {n, H});
      project(act, w.down, staged);
      if (admit_op("copy", y_rows.raw(), staged.raw(), staged.nbytes(), stream))
        TESSERA_CUDA_CHECK(
            cudaMemcpyAsync(y_rows.raw(), staged.raw(), staged.nbytes(), cudaMemcpyDeviceToDevice, stream));
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  launch_moe_combine(ptr<float>(y), T, H, slots, E, nullptr, ptr<float>(out), stream, sort.pair_row);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_route(CudaContext& ctx, MoeState& state, const Tensor& x, const LinearWeight& gate, const Tensor& bias,
               const RouterConfig& cfg, Tensor& ids, Tensor& weights) {
  const int64_t T = x.dim(0);
  TESSERA_CHECK(cfg.experts <= 1024 && cfg.groups <= 64 && cfg.top_k <= 32,
                "cuda moe_route: at most 1024 experts in 64 groups and 32 experts per token (got {}, {}, {})",
                cfg.experts, cfg.groups, cfg.top_k);
  Tensor logits = ctx.alloc(DType::kF32, {T, cfg.experts});
  const int64_t H = x.dim(1);
  if (T <= kRouterKernelMaxTokens) {
    launch_router_fused(ptr<float>(x), T, H, ptr<__nv_bfloat16>(gate.weight), cfg.experts, ptr<float>(logits),
                        ptr<float>(bias), cfg.top_k, cfg.groups, cfg.top_groups, cfg.normalize, cfg.scaling,
                        ptr<int32_t>(ids), ptr<float>(weights), static_cast<unsigned*>(state.router_done_blocks.raw()),
                        ctx.stream());
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  // logits = (x_hi + x_lo) · Wᵀ on tensor cores: x = hi + lo to ~2^-17, each product exact in fp32.
  Tensor xs = ctx.alloc(DType::kBF16, {2, T, H});
  __nv_bfloat16* hi = ptr<__nv_bfloat16>(xs);
  launch_f32_to_bf16_split(ptr<float>(x), hi, hi + T * H, x.numel(), ctx.stream());
  const GemmShape g{true, cfg.experts, T, H, H, H, cfg.experts, 1, 0, 0, 0};
  ctx.gemm_bf16_strided(g, ptr<__nv_bfloat16>(gate.weight), hi, ptr<float>(logits));
  ctx.gemm_bf16_strided(g, ptr<__nv_bfloat16>(gate.weight), hi + T * H, ptr<float>(logits), 1.0f);
  launch_router_select(ptr<float>(logits), ptr<float>(bias), T, cfg.experts, cfg.top_k, cfg.groups, cfg.top_groups,
                       cfg.normalize, cfg.scaling, ptr<int32_t>(ids), ptr<float>(weights), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

bool expert_ring_on(const DeviceCaps& caps) { return expert_ring_enabled() && caps.sm == 90 && has_sm90a_code(); }

bool ring_for_step(QuantFormat format, int64_t tokens) { return !(format == QuantFormat::kNvfp4 && tokens == 1); }

bool shared_expert_fits_routed_table(const std::array<QuantMatrix, 3>& shared, const std::array<QuantMatrix, 3>& routed,
                                     int64_t experts) {
  for (int i = 0; i < 3; ++i) {
    const QuantMatrix &a = shared[i], &b = routed[i];
    if (a.format != b.format || a.n != b.n || a.k != b.k || a.scale_cols != b.scale_cols ||
        a.block_rows != b.block_rows || a.block_cols != b.block_cols)
      return false;
  }
  return moe_quant_supported(routed[0], routed[2], experts + 1);
}

bool shared_expert_fold_on() {
  static const bool on = core::env_flag("TESSERA_SHARED_EXPERT_FOLD");
  return on;
}

namespace {
// The ring kernels' tensor maps of a linear: its codes and its scales.
constexpr size_t kRingMapsPerLinear = 2;
}  // namespace

uint64_t routed_expert_table_bytes(uint64_t linears, bool quantized, bool ring) {
  if (!quantized) return linears * sizeof(const __nv_bfloat16*);
  return linears * (sizeof(QuantMatrix) + (ring ? kRingMapsPerLinear * kRingTensorMapBytes : 0));
}

namespace {

bool quantized_experts(const std::vector<ExpertWeights>& experts) {
  return first_held(experts)->gate.format != LinearWeight::Format::kDense;
}

static_assert(sizeof(CUtensorMap) == kRingTensorMapBytes, "the ring kernels step through the maps by this size");

// The ring kernels' tensor maps for the table `host` (QuantMatrix [gate, up, down][experts]): per
// matrix and expert its codes and its scales (encode_ring_maps); another rank's experts get zero
// maps (never read). Undefined when a map cannot be made: the experts then run on grouped_mma.cu.
core::Tensor ring_maps(CudaContext& ctx, const std::vector<QuantMatrix>& host, size_t experts) {
  std::vector<uint8_t> maps(3 * kRingMapsPerLinear * experts * kRingTensorMapBytes, 0);
  for (int matrix = 0; matrix < 3; ++matrix) {
    for (size_t e = 0; e < experts; ++e) {
      const QuantMatrix& m = host[matrix * experts + e];
      if (m.data == nullptr) continue;
      auto* codes = reinterpret_cast<CUtensorMap*>(maps.data() + ((2 * matrix) * experts + e) * kRingTensorMapBytes);
      auto* scales =
          reinterpret_cast<CUtensorMap*>(maps.data() + ((2 * matrix + 1) * experts + e) * kRingTensorMapBytes);
      if (!encode_ring_maps(m, matrix < 2, codes, scales)) {
        spdlog::warn(
            "TESSERA_EXPERT_RING: no tensor map for expert {}'s matrix {} ([{}, {}]); these experts run on "
            "the register-streaming kernels",
            e, matrix, m.n, m.k);
        return {};
      }
    }
  }
  return ctx.upload_bytes(DType::kU8, {static_cast<int64_t>(maps.size())}, maps.data());
}

// The routed experts held quantized, as one table of the kernels' descriptors (every expert in the
// first one's format and shape, else an error naming the expert), with `shared`, when given,
// appended as expert E (shared_expert_folds has checked that it has their format and shape).
const MoeState::QuantTable& quant_table(CudaContext& ctx, MoeState& state, const std::vector<ExpertWeights>& experts,
                                        const ExpertWeights* shared) {
  const auto key = std::make_pair(experts.data(), shared);
  if (ctx.replaying()) {
    auto it = state.quant_tables.find(key);
    if (it != state.quant_tables.end()) return it->second;
  }
  const size_t E = experts.size() + (shared ? 1 : 0);
  std::vector<QuantMatrix> host(3 * E);  // another rank's experts: zero (never read, held_mask)
  const ExpertWeights& first = *first_held(experts);
  for (size_t e = 0; e < E; ++e) {
    const ExpertWeights& w = e < experts.size() ? experts[e] : *shared;
    if (!w.held()) continue;
    for (const LinearWeight* l : {&w.gate, &w.up, &w.down}) {
      const LinearWeight& f = l == &w.gate ? first.gate : l == &w.up ? first.up : first.down;
      TESSERA_CHECK(l->format == f.format && l->out == f.out && l->in == f.in,
                    "MoE experts: {} is {} [{}, {}] where expert 0 has {} [{}, {}] (the quantized kernels take one "
                    "format and shape)",
                    l->name, l->format_name(), l->out, l->in, f.format_name(), f.out, f.in);
    }
    host[e] = quant_matrix(w.gate);
    host[E + e] = quant_matrix(w.up);
    host[2 * E + e] = quant_matrix(w.down);
  }
  auto it = state.quant_tables.find(key);
  // The whole descriptor, not only the addresses: another expert list at reused addresses may hold
  // another format, shape or global scale, which the table on the device carries.
  const auto same = [&](const std::vector<QuantMatrix>& a) {
    if (a.size() != host.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_matrix(a[i], host[i])) return false;
    return true;
  };
  if (it != state.quant_tables.end() && same(it->second.host)) return it->second;
  MoeState::QuantTable t;
  t.storage = ctx.upload_bytes(DType::kU8, {static_cast<int64_t>(host.size() * sizeof(QuantMatrix))}, host.data());
  const size_t ref = static_cast<size_t>(first_held(experts) - experts.data());
  if (expert_ring_on(ctx.caps()) && moe_quant_ring_supported(host[ref], host[2 * E + ref]))
    t.ring_maps = ring_maps(ctx, host, E);
  t.host = std::move(host);
  return state.quant_tables[key] = std::move(t);
}

// Whether the shared expert is expert E of the routed experts' quantized table in this step
// (shared_expert_fold_on, and shared_expert_fits_routed_table: not Kimi-K2.5's bf16 shared expert,
// nor a tensor-parallel rank's slice of DeepSeek-V3's).
bool shared_expert_folds(const std::vector<ExpertWeights>& experts, const ExpertWeights& shared) {
  if (!shared_expert_fold_on() || !shared.held()) return false;
  const ExpertWeights& f = *first_held(experts);
  for (const LinearWeight* l : {&shared.gate, &shared.up, &shared.down})
    if (l->format == LinearWeight::Format::kDense) return false;
  return shared_expert_fits_routed_table(
      {quant_matrix(shared.gate), quant_matrix(shared.up), quant_matrix(shared.down)},
      {quant_matrix(f.gate), quant_matrix(f.up), quant_matrix(f.down)}, static_cast<int64_t>(experts.size()));
}

// The routed experts over their checkpoint-format weights: pairs sorted by expert on the device,
// then the quantized kernels (tensor cores, or kernels/quant/gemv.cu), no host round trip. The
// per-pair outputs are for launch_moe_combine. `shared`, when given, is expert E of the table
// (shared_expert_folds), for the slots' extra_id.
GroupedExperts quantized_grouped_experts(CudaContext& ctx, MoeState& state, const Tensor& x,
                                         const std::vector<ExpertWeights>& experts, const MoeSlots& slots,
                                         const ExpertWeights* shared) {
  const int64_t T = x.dim(0), H = x.dim(1), E = static_cast<int64_t>(experts.size()) + (shared ? 1 : 0);
  const int64_t inter = first_held(experts)->gate.out, P = T * slots.per_token();
  const MoeState::QuantTable& table = quant_table(ctx, state, experts, shared);
  const auto* q = static_cast<const QuantMatrix*>(table.storage.raw());
  const int64_t ref = first_held(experts) - experts.data();
  // Tensor cores (bf16 activations) where the shapes allow; otherwise the CUDA-core kernels (fp32
  // activations).
  const bool mma = moe_quant_mma_supported(table.host[ref], table.host[2 * E + ref]);
  GroupedExperts r;
  r.xb = ctx.alloc(DType::kBF16, {T, H});
  r.meta = ctx.alloc(DType::kI32, {2 * E + 2 + P});
  r.act = ctx.alloc(mma ? DType::kBF16 : DType::kF32, {P, inter});
  r.y_rows = ctx.alloc(DType::kF32, {P, H});
  int32_t* m = ptr<int32_t>(r.meta);
  const MoeGroupedScratch scratch{ptr<__nv_bfloat16>(r.xb),
                                  m,
                                  m + E + 1,
                                  m + 2 * E + 1,
                                  m + 2 * E + 2,
                                  mma ? ptr<__nv_bfloat16>(r.act) : nullptr,
                                  ptr<float>(r.y_rows),
                                  nullptr};
  if (mma && table.ring_maps.raw() != nullptr && ring_for_step(table.host[ref].format, T))
    launch_moe_quant_ring_experts(ptr<float>(x), T, H, slots, E, table.host[ref].format, q, q + E, q + 2 * E,
                                  static_cast<const uint8_t*>(table.ring_maps.raw()), inter, scratch, ctx.stream());
  else if (mma)
    launch_moe_quant_mma_experts(ptr<float>(x), T, H, slots, E, table.host[ref].format, q, q + E, q + 2 * E, inter,
                                 scratch, ctx.stream());
  else
    launch_moe_quant_experts(ptr<float>(x), T, H, slots, E, table.host[ref].format, q, q + E, q + 2 * E, inter,
                             ptr<float>(r.act), scratch, ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
  r.y = ptr<float>(r.y_rows);
  return r;
}

// The tensor-core kernels take every step size (prefill in tiles of 64 pairs that share the
// weights' decode: faster than dequantizing each expert for cuBLASLt, and no routing read back to
// the host); the CUDA-core kernels only decode-sized steps.
bool quantized_grouped_applies(CudaContext& ctx, const Tensor& x, const std::vector<ExpertWeights>& experts) {
  const int64_t T = x.dim(0), E = static_cast<int64_t>(experts.size());
  const ExpertWeights& f = *first_held(experts);
  if (!(f.gate.format == f.down.format && f.up.format == f.gate.format &&
        moe_quant_supported(quant_matrix(f.gate), quant_matrix(f.down), E)))
    return false;
  const MoePlan& plan = ctx.moe_plan({E, x.dim(1), f.gate.out});
  return moe_quant_mma_supported(quant_matrix(f.gate), quant_matrix(f.down)) ? plan.grouped_allowed()
                                                                             : plan.grouped_for(T);
}

}  // namespace

// Decode-sized steps: pairs sorted by expert on the device and grouped kernels that read each
// routed expert once (kernels/moe/grouped.cu), no host round trip. Larger steps (prefill) are
// compute-bound: per-expert cuBLASLt GEMMs, for which the routing is read back to size them.
void moe_experts(CudaContext& ctx, MoeState& state, Ops& ops, const Tensor& x,
                 const std::vector<ExpertWeights>& experts, const Tensor& ids, const Tensor& weights, Tensor& out,
                 const ExpertWeights* shared) {
  const int64_t T = x.dim(0), E = static_cast<int64_t>(experts.size());
  const cudaStream_t stream = ctx.stream();
  // A tensor-parallel rank holding none of the routed experts (more ranks than experts) adds only
  // its part of the shared expert.
  if (E == 0 || T == 0 || first_held(experts) == nullptr) {
    if (admit_op("memset", out.raw(), 0, out.nbytes(), stream))
      TESSERA_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream));
    if (shared && T > 0) add_shared_expert(ctx, ops, x, *shared, out);
    return;
  }
  if (quantized_experts(experts)) {
    // A shared expert of the routed experts' format and shape may ride along as expert E, in a
    // last slot of weight 1 (shared_expert_folds); otherwise it runs after them.
    bool fold = false;
    if (quantized_grouped_applies(ctx, x, experts)) {
      fold = shared != nullptr && shared_expert_folds(experts, *shared);
      const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(ids.dim(1)),
                           fold ? static_cast<int>(E) : -1, held_mask(ctx, state, experts)};
      const GroupedExperts run = quantized_grouped_experts(ctx, state, x, experts, slots, fold ? shared : nullptr);
      launch_moe_combine(run.y, T, x.dim(1), slots, fold ? E + 1 : E, nullptr, ptr<float>(out), stream);
      TESSERA_CUDA_CHECK_LAUNCH();
    } else {
      moe_experts_per_expert(ctx, state, x, experts, ids, weights, out);
    }
    if (shared && !fold) add_shared_expert(ctx, ops, x, *shared, out);
    return;
  }
  if (!moe_grouped_applies(ctx, x, experts)) {
    moe_experts_per_expert(ctx, state, x, experts, ids, weights, out);
    if (shared) add_shared_expert(ctx, ops, x, *shared, out);
    return;
  }
  // The shared expert rides along as expert E in a last slot of weight 1 when it has the routed
  // experts' shape (one shared expert): its weights are read in the same kernels.
  const bool fold = shared != nullptr && shared_expert_groups_with(x, experts, *shared);
  const ExpertTable& table = expert_table(ctx, state, experts, fold ? shared : nullptr);
  const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(ids.dim(1)),
                       fold ? static_cast<int>(E) : -1, held_mask(ctx, state, experts)};
  const int64_t table_experts = fold ? E + 1 : E;
  const GroupedExperts run =
      grouped_experts(ctx, x, slots, table_experts, table, 0, first_held(experts)->gate.out, stream);
  launch_moe_combine(run.y, T, x.dim(1), slots, table_experts, nullptr, ptr<float>(out), stream);
  TESSERA_CUDA_CHECK_LAUNCH();
  if (shared && !fold) add_shared_expert(ctx, ops, x, *shared, out);
}

namespace {

// Whether a shared expert held in bf16 runs alone in the bf16 grouped kernels beside quantized
// routed experts (Kimi-K2.5: routed NVFP4, shared bf16) for a step of x's tokens: the plan chose
// the grouped kernels for this MoE and the step is decode-sized.
bool shared_expert_runs_alone(CudaContext& ctx, const Tensor& x, const std::vector<ExpertWeights>& experts,
                              const ExpertWeights& shared) {
  const int64_t H = x.dim(1), inter = shared.gate.out;
  const bool dense = shared.gate.format == LinearWeight::Format::kDense &&
                     shared.up.format == LinearWeight::Format::kDense &&
                     shared.down.format == LinearWeight::Format::kDense;
  return dense && has_routed_shape(shared, H, inter) && moe_grouped_supported(H, inter, 1) &&
         ctx.moe_plan({static_cast<int64_t>(experts.size()), H, first_held(experts)->gate.out}).grouped_for(x.dim(0));
}

// Whether a quantized shared expert (DeepSeek-V3 FP8) runs on the second stream beside quantized
// routed experts: one-token steps, where ops.mlp runs each of its projections on the matrix-vector
// kernel (quantized_linear), so that quantized_shared_expert gives the same bits; the routed experts
// on the grouped kernels, and not folded into their table (shared_expert_folds).
bool quantized_shared_runs_beside(CudaContext& ctx, const Tensor& x, const std::vector<ExpertWeights>& experts,
                                  const ExpertWeights& shared) {
  if (x.dim(0) != 1 || !quantized_grouped_applies(ctx, x, experts) || shared_expert_folds(experts, shared))
    return false;
  for (const LinearWeight* l : {&shared.gate, &shared.up, &shared.down})
    if (l->format == LinearWeight::Format::kDense || !quant_gemv_supported(quant_matrix(*l))) return false;
  return true;
}

// The buffers of quantized_shared_expert, held until the second stream is joined.
struct SideMlp {
  Tensor g, u, act, y;
};
// y = down(silu(x · gateᵀ) * (x · upᵀ)) for one token on `side`: the launches ops.mlp makes there.
SideMlp quantized_shared_expert(CudaContext& ctx, const Tensor& x, const ExpertWeights& shared, cudaStream_t side) {
  const int64_t T = x.dim(0), H = x.dim(1), inter = shared.gate.out;
  SideMlp r{ctx.alloc(DType::kF32, {T, inter}), ctx.alloc(DType::kF32, {T, inter}), ctx.alloc(DType::kF32, {T, inter}),
            ctx.alloc(DType::kF32, {T, H})};
  launch_quant_gemv(quant_matrix(shared.gate), ptr<float>(x), H, T, ptr<float>(r.g), ctx.num_sms(), side);
  launch_quant_gemv(quant_matrix(shared.up), ptr<float>(x), H, T, ptr<float>(r.u), ctx.num_sms(), side);
  launch_silu_mul(ptr<float>(r.g), ptr<float>(r.u), ptr<float>(r.act), T * inter, side);
  launch_quant_gemv(quant_matrix(shared.down), ptr<float>(r.act), inter, T, ptr<float>(r.y), ctx.num_sms(), side);
  TESSERA_CUDA_CHECK_LAUNCH();
  return r;
}

}  // namespace

// At batch 1 the router is a chain of short dependent steps that leaves most of the memory
// bandwidth idle for ~20 µs. The shared expert needs only x, so on the grouped path it runs on a
// second stream from the start of the block, beside the router, the routed experts' sorting and
// the routed experts themselves, and the combine adds its output last (the order moe_experts adds
// it in, so the sum is the same). With bf16 routed experts it is one more expert of their table;
// with quantized routed experts (whose kernels leave bandwidth unused: they are bound by the
// weights' decode) a bf16 shared expert runs alone in the bf16 grouped kernels, and a quantized
// one (DeepSeek-V3 FP8) of a one-token step on the matrix-vector kernels it would run on after them
// (quantized_shared_runs_beside: FP8 batch 1 5% faster a layer on an H100, docs/PERFORMANCE.md).
// TESSERA_SHARED_EXPERT_STREAM=0 keeps it in the routed kernels' launch, or after the quantized ones
// (for A/B measurements).
bool moe(CudaContext& ctx, MoeState& state, const Tensor& x, const LinearWeight& router, const Tensor& bias,
         const RouterConfig& cfg, const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, Tensor& out) {
  const int64_t T = x.dim(0), E = static_cast<int64_t>(experts.size());
  if (!shared || T == 0 || E == 0 || !all_held(experts) || !shared_expert_stream_enabled()) return false;
  const bool quant = quantized_experts(experts);
  const bool quant_shared = quant && quantized_shared_runs_beside(ctx, x, experts, *shared);
  if (!quant_shared &&
      (quant ? !(quantized_grouped_applies(ctx, x, experts) && shared_expert_runs_alone(ctx, x, experts, *shared))
             : !(moe_grouped_applies(ctx, x, experts) && shared_expert_groups_with(x, experts, *shared))))
    return false;
  const cudaStream_t stream = ctx.stream();
  cudaStream_t side = ctx.side_stream();
  const cudaEvent_t fork = ctx.fork_event(), join = ctx.join_event();
  if (admit_op("fork", fork, stream, side)) {
    TESSERA_CUDA_CHECK(cudaEventRecord(fork, stream));
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
  }
  // The shared expert: quantized on the matrix-vector kernels; bf16 in the grouped kernels, alone
  // (one slot a token) or after the bf16 routed experts in their table. Its buffers are held until
  // the join.
  SideMlp quant_run;
  GroupedExperts shared_run;
  const ExpertTable* table = nullptr;  // the bf16 shared expert's: after the bf16 routed experts, or alone
  if (quant_shared) {
    quant_run = quantized_shared_expert(ctx, x, *shared, side);
  } else {
    static const std::vector<ExpertWeights> kNoRouted;
    table = &expert_table(ctx, state, quant ? kNoRouted : experts, shared);
    const MoeSlots shared_slots{nullptr, nullptr, 0, 0};
    shared_run = grouped_experts(ctx, x, shared_slots, 1, *table, quant ? 0 : E, shared->gate.out, side);
  }
  const float* shared_y = quant_shared ? ptr<float>(quant_run.y) : shared_run.y;
  // Should anything below throw (a refused router config, an allocation), the second stream must
  // finish before shared_run's buffers go back to the pool: later work would reuse memory it writes.
  struct WaitOnUnwind {
    cudaStream_t stream;
    bool joined = false;
    ~WaitOnUnwind() {
      if (!joined) (void)cudaStreamSynchronize(stream);
    }
  } unwind{side};
  if (admit_op("record", join, side)) TESSERA_CUDA_CHECK(cudaEventRecord(join, side));
  Tensor ids = ctx.alloc(DType::kI32, {T, cfg.top_k}), weights = ctx.alloc(DType::kF32, {T, cfg.top_k});
  moe_route(ctx, state, x, router, bias, cfg, ids, weights);
  const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(cfg.top_k), -1};
  const GroupedExperts run = quant ? quantized_grouped_experts(ctx, state, x, experts, slots, nullptr)
                                   : grouped_experts(ctx, x, slots, E, *table, 0, experts[0].gate.out, stream);
  if (admit_op("join", stream, join)) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream, join, 0));
  unwind.joined = true;
  launch_moe_combine(run.y, T, x.dim(1), slots, E, shared_y, ptr<float>(out), stream);
  TESSERA_CUDA_CHECK_LAUNCH();
  // The shared expert's buffers go back to the pool here: later work on the stream is ordered after join.
  return true;
}

}  // namespace tessera::ops::cuda
