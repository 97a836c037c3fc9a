// CudaOps: the op contract (ops.h) on CUDA, forwarding each op to its family (linear.h,
// elementwise.h, mla.h, moe.h, sampling.h, weights.h) over the backend's CudaContext
// (runtime/context.h), which holds what they share. What is left here is the backend as a whole:
// its plan, memory, host transfers and decode-step hooks.
#include "ops/cuda/cuda_ops.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "core/error.h"
#include "core/format.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/linear.h"
#include "ops/cuda/mla.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/runtime/context.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/runtime/device_pool.h"
#include "ops/cuda/sampling.h"
#include "ops/cuda/weights.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

uint64_t free_device_bytes_uncached(int index) {
  device_pool(index).trim();
  return query_device_caps(index).free_bytes;
}

std::string device_description(int index) {
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     p.totalGlobalMem / double(1 << 30));
}

namespace {

// One line of the plan per group of linears: what the device holds and which kernels compute on it.
// `ring`: the routed experts run on the ring kernels where their shapes allow (expert_ring_on, as
// cuda/moe.cpp decides; its one-token exception for NVFP4 is ring_for_step); `linear_ring`: the other
// quantized projections of decode steps do (linear_ring_on, as cuda/linear.cpp decides).
// `folded`: the group is the shared experts, run in the routed experts' kernels (shared_expert_fold_on).
KernelChoice weight_group_row(const WeightGroup& g, bool ring, bool linear_ring, bool folded) {
  const std::string size = fmt::format("{} linears, {:.3f} B parameters, {} stored", g.linears, g.params / 1e9,
                                       core::human_bytes(g.stored_bytes));
  const bool nvfp4 = g.format == LinearWeight::Format::kNvfp4;
  if (g.format == LinearWeight::Format::kDense)
    return {"weights: " + g.name, g.format_name == "bf16" ? "bf16 on the device" : g.format_name + " -> bf16 at load",
            size, true};
  if (!keeps_quantized(g.format, g.use, g.min_in))
    return {"weights: " + g.name, g.format_name + " dequantized to bf16 on the device at load",
            size + (g.use == LinearUse::kRouter ? "; the router kernels read bf16" : "; MLA attention reads bf16"),
            true};
  const std::string mv = nvfp4 ? "W4A16" : "W8A16";
  const std::string kernel =
      folded ? fmt::format(
                   "{} stored; {} in the routed experts' grouped kernels as one more expert, a last slot of "
                   "weight 1 a token, where they take the step and the shared expert has their shape "
                   "(TESSERA_SHARED_EXPERT_FOLD=1); else as the other projections",
                   g.format_name, mv)
      : g.name == kRoutedExpertsGroup
          ? fmt::format(
                "{} stored; {} over expert-sorted pairs: {}quant_expert_mma_kernel (mma.sync, the weights as the A "
                "operand, 64 pairs a decoded weight fragment at prefill; widths multiples of 128) at every step "
                "size, or "
                "else quant_expert_kernel (steps <= {} tokens) and dequantized + cuBLASLt per expert beyond",
                g.format_name, mv,
                ring ? "quant_expert_ring_kernel (the weights through a shared-memory ring by TMA, a tensor map "
                       "of 128 B a matrix and expert; widths multiples of 256 NVFP4, 128 FP8; NVFP4 one-token "
                       "steps excepted; TESSERA_EXPERT_RING=0 turns it off), else "
                     : "",
                kGroupedMoeMaxTokens)
          : fmt::format(
                "{} stored; {} {}quant_linear_mma_kernel (2-{} tokens, activations as two bf16 halves; widths "
                "multiples of 128), quant_gemv_kernel (1 token{}, or up to {} where the MMA kernel does not fit), "
                "dequantized + cuBLASLt GEMM beyond",
                g.format_name, mv,
                linear_ring ? fmt::format("quant_linear_ring_kernel ({}-{} tokens, matrices of {} rows or more: the "
                                          "weights through a shared-memory ring by TMA, K split over a cluster of "
                                          "up to 8 blocks; widths multiples of 256 NVFP4, 128 FP8; "
                                          "TESSERA_LINEAR_RING=0 turns it off), else ",
                                          kLinearRingMinTokens, kQuantMmaMaxTokens, kLinearRingMinRows)
                            : "",
                kQuantMmaMaxTokens, quant_gemv_pair_on() ? "; q_a and kv_a as one launch at one token" : "",
                quant_gemv_max_tokens(nvfp4 ? QuantFormat::kNvfp4 : QuantFormat::kFp8Block));
  return {"weights: " + g.name, kernel,
          size +
              (nvfp4 ? "; each 4-byte word of codes remapped in place at load (an invertible XOR map) for the decode"
                     : "") +
              "; dequantized in registers, fp32 accumulation",
          true};
}

// Whether the shared experts' group may run in the routed experts' quantized kernels (cuda/moe.cpp:
// shared_expert_folds, which also checks the shapes): the switch is on and both groups are held
// quantized in one checkpoint format.
bool folds_into_routed(const WeightGroup& shared, std::span<const WeightGroup> linears) {
  if (!shared_expert_fold_on() || !keeps_quantized(shared.format, shared.use, shared.min_in)) return false;
  return std::any_of(linears.begin(), linears.end(), [&](const WeightGroup& g) {
    return g.name == kRoutedExpertsGroup && g.format_name == shared.format_name &&
           keeps_quantized(g.format, g.use, g.min_in);
  });
}

class CudaOps final : public Ops {
 public:
  CudaOps(const std::string& kernels, bool step_graphs, int device) : ctx_(kernels, step_graphs, device), moe_(ctx_) {}

  std::string name() const override { return "cuda"; }

  BackendPlan plan(const io::ModelConfig& c, core::KvCacheDtype kv_dtype,
                   std::span<const WeightGroup> linears) const override {
    const DeviceCaps& caps = ctx_.caps();
    BackendPlan p;
    p.device = fmt::format("{} (sm_{}), {} SMs, {:.1f} GiB; build carries {}", caps.name, caps.sm, caps.num_sms,
                           caps.total_bytes / double(1 << 30), compiled_architectures());
    size_t free = 0, total = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    p.free_bytes = free;
    p.total_bytes = total;
    // upload_linear keeps projections in the checkpoint's format and makes a quantized kv_b or router
    // bf16, upload_table keeps the embedding in bf16, upload_vector keeps vectors in fp32.
    const uint64_t vectors = c.vector_parameter_count();
    if (linears.empty()) {
      p.weight_bytes = 2 * (c.parameter_count() - vectors) + 4 * vectors;
      p.weight_rule = "matrices bf16 on the device (counted from the config), vectors fp32";
    } else {
      p.weight_bytes = 2 * static_cast<uint64_t>(c.vocab_size) * c.hidden_size + 4 * vectors;
      for (const WeightGroup& g : linears)
        p.weight_bytes +=
            keeps_quantized(g.format, g.use, g.min_in) || g.format_name == "bf16" ? g.stored_bytes : 2 * g.params;
      p.weight_rule =
          "linears as the checkpoint stores them (FP8 / NVFP4 kv_b and router as bf16), embedding bf16, vectors "
          "fp32";
    }
    p.kernels = plan_kernels(caps,
                             {c.num_attention_heads, c.kv_lora_rank, c.qk_rope_head_dim, c.qk_nope_head_dim,
                              c.v_head_dim, kv_dtype == core::KvCacheDtype::kFp8E4M3},
                             {c.n_routed_experts, c.hidden_size, c.moe_intermediate_size}, ctx_.overrides())
                    .rows;
    const bool ring = expert_ring_on(caps), linear_ring = linear_ring_on(caps);
    for (const WeightGroup& g : linears) {
      const bool folded = g.name == kSharedExpertsGroup && folds_into_routed(g, linears);
      p.kernels.push_back(weight_group_row(g, ring, linear_ring, folded));
      // The maps are counted whenever the ring is on: an upper bound for widths it does not take
      // (and for a folded shared expert whose shape turns out not to be the routed experts').
      if (g.name == kRoutedExpertsGroup || folded)
        p.table_bytes += routed_expert_table_bytes(g.linears, keeps_quantized(g.format, g.use, g.min_in), ring);
    }
    if (p.table_bytes > 0)
      p.table_rule = ring ? "the routed experts' descriptors and the ring kernels' tensor maps"
                          : "the routed experts' descriptors";
    p.decode_steps = ctx_.step_graphs() && ctx_.overrides().moe == MoeKernel::kPerExpert
                         ? "kernels launched one by one (--kernels moe=per-expert reads the routing back to the host, "
                           "which a CUDA graph cannot hold)"
                     : ctx_.step_graphs()
                         ? fmt::format(
                               "CUDA graphs: recorded per batch size (up to {} sequences) on its second "
                               "step, then replayed (--enforce-eager turns them off)",
                               kGroupedMoeMaxTokens)
                         : "kernels launched one by one (--enforce-eager, TESSERA_CUDA_GRAPHS=0 or "
                           "TESSERA_DEVICE_POOL=exact)";
    return p;
  }

  std::optional<DeviceMemory> device_memory() override { return ctx_.device_memory(); }

  // Unspecified contents (Ops::empty); with TESSERA_DEVICE_POOL=exact they are NaN, so that a
  // reader of something no op wrote shows up in the tests that run in that mode.
  Tensor empty(core::Shape shape) override {
    Tensor t = ctx_.alloc(DType::kF32, std::move(shape));
    if (DevicePool::exact_mode() && admit_op("memset", t.raw(), 0xff, t.nbytes(), ctx_.stream()))
      TESSERA_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xff, t.nbytes(), ctx_.stream()));
    return t;
  }
  Tensor empty_i32(core::Shape shape) override { return ctx_.alloc(DType::kI32, std::move(shape)); }

  // bf16 by default; fp8 e4m3 with a per-layer scale (U8 pages, see KvLayerView) halves the bytes.
  std::vector<core::KvCacheDtype> supported_kv_dtypes() const override {
    return {core::KvCacheDtype::kBF16, core::KvCacheDtype::kFp8E4M3};
  }
  core::KvCacheDtype default_kv_dtype() const override { return core::KvCacheDtype::kBF16; }
  Tensor empty_kv_pages(core::Shape shape, core::KvCacheDtype dtype) override {
    return cuda::empty_kv_pages(ctx_, std::move(shape), dtype);
  }

  LinearWeight upload_linear(const LinearWeight& w, LinearUse use) override {
    return cuda::upload_linear(ctx_, w, use);
  }
  Tensor upload_vector(const Tensor& t) override { return cuda::upload_vector(ctx_, t); }
  bool uploads_copy_weights() const override { return true; }
  std::shared_ptr<void> staging_host_buffer(size_t bytes) override { return cuda::pinned_host_buffer(bytes); }
  Tensor upload_table(const Tensor& t) override { return cuda::upload_table(ctx_, t); }

  Tensor from_host_f32(core::Shape shape, const float* data) override {
    return ctx_.upload_async(DType::kF32, std::move(shape), data);
  }
  Tensor from_host_i32(core::Shape shape, const int32_t* data) override {
    return ctx_.upload_async(DType::kI32, std::move(shape), data);
  }
  std::vector<float> to_host_f32(const Tensor& x) override { return to_host<float>(x); }
  std::vector<int32_t> to_host_i32(const Tensor& x) override { return to_host<int32_t>(x); }
  std::vector<uint8_t> to_host_bytes(const Tensor& x) override {
    std::vector<uint8_t> v(x.nbytes());
    if (!v.empty())
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(v.data(), x.raw(), v.size(), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.sync();
    return v;
  }

  void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) override {
    cuda::embedding(ctx_, table, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t col_begin) override {
    cuda::rms_norm(ctx_, x, weight, eps, out, col_begin);
  }
  void add_rms_norm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) override {
    cuda::add_rms_norm(ctx_, x, y, weight, eps, out);
  }
  void add_inplace(Tensor& x, const Tensor& y) override { cuda::add_inplace(ctx_, x, y); }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override { cuda::silu_mul(ctx_, gate, up, out); }
  void rope_inplace(Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override {
    cuda::rope_inplace(ctx_, x, tables, col_begin, col_stride, count);
  }

  void linear(const Tensor& x, const LinearWeight& w, Tensor& out) override { cuda::linear(ctx_, x, w, out); }
  void linear_pair(const Tensor& x, const LinearWeight& w1, Tensor& out1, const LinearWeight& w2,
                   Tensor& out2) override {
    if (!cuda::linear_pair(ctx_, x, w1, out1, w2, out2)) Ops::linear_pair(x, w1, out1, w2, out2);
  }
  void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const LinearWeight& w,
                       Tensor& out) override {
    if (!cuda::rms_norm_linear(ctx_, x, norm_weight, eps, w, out)) Ops::rms_norm_linear(x, norm_weight, eps, w, out);
  }

  void kv_cache_write(KvLayerView& cache, const Tensor& latent, std::span<const AttentionSeq> seqs) override {
    cuda::kv_cache_write(ctx_, cache, latent, seqs);
  }
  void mla_prepare(Tensor& q, Tensor& latent, const Tensor& latent_norm, float eps, const RopeTables& tables,
                   const MlaDims& d, KvLayerView& cache, std::span<const AttentionSeq> seqs) override {
    cuda::mla_prepare(ctx_, q, latent, latent_norm, eps, tables, d, cache, seqs);
  }
  void mla_attention(const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& d,
                     std::span<const AttentionSeq> seqs, Tensor& out) override {
    cuda::mla_attention(ctx_, q, cache, kv_b, d, seqs, out);
  }
  void mla_absorb_q(const Tensor& q, const LinearWeight& kv_b, const MlaDims& d, Tensor& q_full) override {
    cuda::mla_absorb_q(ctx_, q, kv_b, d, q_full);
  }
  void mla_attend_latent(const Tensor& q_full, const KvLayerView& cache, const MlaDims& d,
                         std::span<const AttentionSeq> seqs, bool decode_step, Tensor& o_lat, Tensor& lse) override {
    cuda::mla_attend_latent(ctx_, q_full, cache, d, seqs, decode_step, o_lat, lse);
  }
  void mla_rank_weigh(Tensor& o_lat, const Tensor& lse, const Tensor& lse_all) override {
    cuda::mla_rank_weigh(ctx_, o_lat, lse, lse_all);
  }
  void mla_up_v(const Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& d,
                Tensor& out) override {
    cuda::mla_up_v(ctx_, o_lat, head_begin, kv_b, d, out);
  }

  void moe_route(const Tensor& x, const LinearWeight& gate, const Tensor& bias, const RouterConfig& cfg, Tensor& ids,
                 Tensor& weights) override {
    cuda::moe_route(ctx_, moe_, x, gate, bias, cfg, ids, weights);
  }
  void moe_experts(const Tensor& x, const std::vector<ExpertWeights>& experts, const Tensor& ids, const Tensor& weights,
                   Tensor& out, const ExpertWeights* shared) override {
    cuda::moe_experts(ctx_, moe_, *this, x, experts, ids, weights, out, shared);
  }
  void moe(const Tensor& x, const LinearWeight& router, const Tensor& bias, const RouterConfig& cfg,
           const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, Tensor& out) override {
    if (!cuda::moe(ctx_, moe_, x, router, bias, cfg, experts, shared, out))
      Ops::moe(x, router, bias, cfg, experts, shared, out);
  }

  void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) override {
    cuda::gather_rows(ctx_, x, rows, out);
  }
  void sample(const Tensor& logits, std::span<const SampleRow> rows, Tensor& ids_out, Tensor* logprob_out) override {
    cuda::sample(ctx_, logits, rows, ids_out, logprob_out);
  }
  void mask_logits(Tensor& logits, std::span<const uint32_t> bitmask) override {
    cuda::mask_logits(ctx_, logits, bitmask);
  }

  Tensor graphed_step(int64_t key, const std::function<Tensor()>& step) override {
    ctx_.make_current();  // a rank's step runs on its own thread
    return ctx_.graphed_step(key, step);
  }
  void step_boundary() override { ctx_.step_boundary(); }
  StepGraphStats graph_stats() const { return ctx_.graph_stats(); }
  cudaStream_t stream() { return ctx_.stream(); }
  void make_current() const { ctx_.make_current(); }

 private:
  template <class T>
  std::vector<T> to_host(const Tensor& x) {
    std::vector<T> v(static_cast<size_t>(x.numel()));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(v.data(), x.raw(), v.size() * sizeof(T), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.sync();
    return v;
  }

  CudaContext ctx_;
  MoeState moe_;  // after ctx_: made on its device
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(const std::string& kernels, bool step_graphs, int device) {
  return std::make_unique<CudaOps>(kernels, step_graphs, device);
}

bool step_graphs_enabled(bool step_graphs) {
  return step_graphs && ab_switch_on("TESSERA_CUDA_GRAPHS") && !DevicePool::exact_mode();
}

void* backend_stream(Ops& ops) {
  auto* cuda = dynamic_cast<CudaOps*>(&ops);
  TESSERA_CHECK(cuda != nullptr, "backend_stream: the {} backend has no CUDA stream", ops.name());
  return cuda->stream();
}

void make_current(Ops& ops) {
  auto* cuda = dynamic_cast<CudaOps*>(&ops);
  TESSERA_CHECK(cuda != nullptr, "make_current: the {} backend has no CUDA device", ops.name());
  cuda->make_current();
}

StepGraphStats step_graph_stats(const Ops& ops) {
  const auto* cuda = dynamic_cast<const CudaOps*>(&ops);
  return cuda ? cuda->graph_stats() : StepGraphStats{};
}

std::vector<uint8_t> device_bytes(const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  // cudaMemcpy orders after the legacy default stream, with which the backend's stream synchronises.
  if (!v.empty()) TESSERA_CUDA_CHECK(cudaMemcpy(v.data(), t.raw(), v.size(), cudaMemcpyDeviceToHost));
  return v;
}

Tensor random_bf16_tensor(core::Shape shape, float scale, uint64_t seed) {
  const int64_t n = core::shape_numel(shape);
  auto owner = device_pool().allocate_resident(static_cast<size_t>(n) * 2);  // weights: exact size
  Tensor t = Tensor::adopt(DType::kBF16, std::move(shape), owner.get(), core::Device::kCuda, owner);
  launch_fill_random_bf16(t.data<__nv_bfloat16>(), n, seed, scale, nullptr);
  TESSERA_CUDA_CHECK_LAUNCH();
  return t;
}

Tensor random_bytes_tensor(core::Shape shape, uint8_t and_mask, uint8_t or_mask, uint64_t seed) {
  const int64_t n = core::shape_numel(shape);
  auto owner = device_pool().allocate_resident(static_cast<size_t>(n));  // weights: exact size
  Tensor t = Tensor::adopt(DType::kU8, std::move(shape), owner.get(), core::Device::kCuda, owner);
  launch_fill_random_bytes(t.data<uint8_t>(), n, seed, and_mask, or_mask, nullptr);
  TESSERA_CUDA_CHECK_LAUNCH();
  return t;
}

}  // namespace tessera::ops::cuda
