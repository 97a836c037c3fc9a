// An Ops decorator base: every virtual of the contract forwarded to another backend, so that a
// decorator (the self-check's op checker, the test hook that perturbs an op) overrides only the ops
// it watches. The fused ops (linear_pair, rms_norm_linear, add_rms_norm, mla_prepare, moe) are
// forwarded whole, so the wrapped backend runs its own kernels for them, not the contract's
// sequence.
#pragma once

#include "ops/ops.h"

namespace tessera::ops {

class ForwardingOps : public Ops {
 public:
  explicit ForwardingOps(Ops& inner) : inner_(inner) {}
  Ops& inner() { return inner_; }

  std::string name() const override { return inner_.name(); }
  std::optional<DeviceMemory> device_memory() override { return inner_.device_memory(); }
  BackendPlan plan(const io::ModelConfig& config, core::KvCacheDtype kv_dtype,
                   std::span<const WeightGroup> linears) const override {
    return inner_.plan(config, kv_dtype, linears);
  }
  core::Tensor empty(core::Shape shape) override { return inner_.empty(std::move(shape)); }
  core::Tensor empty_i32(core::Shape shape) override { return inner_.empty_i32(std::move(shape)); }
  LinearWeight upload_linear(const LinearWeight& w, LinearUse use) override { return inner_.upload_linear(w, use); }
  core::Tensor upload_vector(const core::Tensor& t) override { return inner_.upload_vector(t); }
  core::Tensor upload_table(const core::Tensor& t) override { return inner_.upload_table(t); }
  bool uploads_copy_weights() const override { return inner_.uploads_copy_weights(); }
  std::shared_ptr<void> staging_host_buffer(size_t bytes) override { return inner_.staging_host_buffer(bytes); }
  std::vector<core::KvCacheDtype> supported_kv_dtypes() const override { return inner_.supported_kv_dtypes(); }
  core::KvCacheDtype default_kv_dtype() const override { return inner_.default_kv_dtype(); }
  core::Tensor empty_kv_pages(core::Shape shape, core::KvCacheDtype dtype) override {
    return inner_.empty_kv_pages(std::move(shape), dtype);
  }
  core::Tensor from_host_f32(core::Shape shape, const float* data) override {
    return inner_.from_host_f32(std::move(shape), data);
  }

  void embedding(const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out) override {
    inner_.embedding(table, ids, out);
  }
  void rms_norm(const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
                int64_t col_begin) override {
    inner_.rms_norm(x, weight, eps, out, col_begin);
  }
  void linear(const core::Tensor& x, const LinearWeight& w, core::Tensor& out) override { inner_.linear(x, w, out); }
  void linear_pair(const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1, const LinearWeight& w2,
                   core::Tensor& out2) override {
    inner_.linear_pair(x, w1, out1, w2, out2);
  }
  void rms_norm_linear(const core::Tensor& x, const core::Tensor& norm_weight, float eps, const LinearWeight& w,
                       core::Tensor& out) override {
    inner_.rms_norm_linear(x, norm_weight, eps, w, out);
  }
  void add_inplace(core::Tensor& x, const core::Tensor& y) override { inner_.add_inplace(x, y); }
  void add_rms_norm(core::Tensor& x, const core::Tensor& y, const core::Tensor& weight, float eps,
                    core::Tensor& out) override {
    inner_.add_rms_norm(x, y, weight, eps, out);
  }
  void silu_mul(const core::Tensor& gate, const core::Tensor& up, core::Tensor& out) override {
    inner_.silu_mul(gate, up, out);
  }
  void rope_inplace(core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override {
    inner_.rope_inplace(x, tables, col_begin, col_stride, count);
  }
  void kv_cache_write(KvLayerView& cache, const core::Tensor& latent, std::span<const AttentionSeq> seqs) override {
    inner_.kv_cache_write(cache, latent, seqs);
  }
  void mla_prepare(core::Tensor& q, core::Tensor& latent, const core::Tensor& latent_norm, float eps,
                   const RopeTables& tables, const MlaDims& dims, KvLayerView& cache,
                   std::span<const AttentionSeq> seqs) override {
    inner_.mla_prepare(q, latent, latent_norm, eps, tables, dims, cache, seqs);
  }
  void mla_attention(const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& dims,
                     std::span<const AttentionSeq> seqs, core::Tensor& out) override {
    inner_.mla_attention(q, cache, kv_b, dims, seqs, out);
  }
  void mla_absorb_q(const core::Tensor& q, const LinearWeight& kv_b, const MlaDims& dims,
                    core::Tensor& q_full) override {
    inner_.mla_absorb_q(q, kv_b, dims, q_full);
  }
  void mla_attend_latent(const core::Tensor& q_full, const KvLayerView& cache, const MlaDims& dims,
                         std::span<const AttentionSeq> seqs, bool decode_step, core::Tensor& o_lat,
                         core::Tensor& lse) override {
    inner_.mla_attend_latent(q_full, cache, dims, seqs, decode_step, o_lat, lse);
  }
  void mla_rank_weigh(core::Tensor& o_lat, const core::Tensor& lse, const core::Tensor& lse_all) override {
    inner_.mla_rank_weigh(o_lat, lse, lse_all);
  }
  void mla_up_v(const core::Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& dims,
                core::Tensor& out) override {
    inner_.mla_up_v(o_lat, head_begin, kv_b, dims, out);
  }
  void moe_route(const core::Tensor& x, const LinearWeight& gate, const core::Tensor& bias, const RouterConfig& cfg,
                 core::Tensor& ids, core::Tensor& weights) override {
    inner_.moe_route(x, gate, bias, cfg, ids, weights);
  }
  void moe_experts(const core::Tensor& x, const std::vector<ExpertWeights>& experts, const core::Tensor& ids,
                   const core::Tensor& weights, core::Tensor& out, const ExpertWeights* shared) override {
    inner_.moe_experts(x, experts, ids, weights, out, shared);
  }
  void moe(const core::Tensor& x, const LinearWeight& router, const core::Tensor& bias, const RouterConfig& cfg,
           const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, core::Tensor& out) override {
    inner_.moe(x, router, bias, cfg, experts, shared, out);
  }
  core::Tensor graphed_step(int64_t key, const std::function<core::Tensor()>& step) override {
    return inner_.graphed_step(key, step);
  }
  void step_boundary() override { inner_.step_boundary(); }
  void gather_rows(const core::Tensor& x, std::span<const int64_t> rows, core::Tensor& out) override {
    inner_.gather_rows(x, rows, out);
  }
  void sample(const core::Tensor& logits, std::span<const SampleRow> rows, core::Tensor& ids_out,
              core::Tensor* logprob_out) override {
    inner_.sample(logits, rows, ids_out, logprob_out);
  }
  void mask_logits(core::Tensor& logits, std::span<const uint32_t> bitmask) override {
    inner_.mask_logits(logits, bitmask);
  }
  std::vector<float> to_host_f32(const core::Tensor& x) override { return inner_.to_host_f32(x); }
  std::vector<int32_t> to_host_i32(const core::Tensor& x) override { return inner_.to_host_i32(x); }
  std::vector<uint8_t> to_host_bytes(const core::Tensor& x) override { return inner_.to_host_bytes(x); }
  core::Tensor from_host_i32(core::Shape shape, const int32_t* data) override {
    return inner_.from_host_i32(std::move(shape), data);
  }

 private:
  Ops& inner_;
};

}  // namespace tessera::ops
