// The CPU reference backend: fp32 compute, weights dequantized exactly (row by row, on the fly),
// activations never quantized, multi-threaded over rows/heads. Every other backend is tested
// against it, so clarity and exactness come before speed.
#pragma once

#include "ops/ops.h"

namespace tessera::ops::cpu {

// Not final: tests derive from it (e.g. a backend that copies its weights, to test the staged loader).
class CpuOps : public Ops {
 public:
  std::string name() const override { return "cpu"; }
  BackendPlan plan(const io::ModelConfig& config, core::KvCacheDtype kv_dtype,
                   std::span<const WeightGroup> linears) const override;
  core::Tensor empty(core::Shape shape) override;
  core::Tensor empty_i32(core::Shape shape) override;
  core::Tensor from_host_f32(core::Shape shape, const float* data) override;
  // The reference backend keeps the cache in fp32 by default so that it stays exact; fp8 (e4m3 with
  // a per-layer scale, see KvLayerView) is the reference for the GPU's fp8 cache.
  std::vector<core::KvCacheDtype> supported_kv_dtypes() const override {
    return {core::KvCacheDtype::kF32, core::KvCacheDtype::kFp8E4M3};
  }
  core::KvCacheDtype default_kv_dtype() const override { return core::KvCacheDtype::kF32; }
  core::Tensor empty_kv_pages(core::Shape shape, core::KvCacheDtype dtype) override;
  void embedding(const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out) override;
  void rms_norm(const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
                int64_t col_begin) override;
  void linear(const core::Tensor& x, const LinearWeight& w, core::Tensor& out) override;
  void add_inplace(core::Tensor& x, const core::Tensor& y) override;
  void silu_mul(const core::Tensor& gate, const core::Tensor& up, core::Tensor& out) override;
  void rope_inplace(core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override;
  void kv_cache_write(KvLayerView& cache, const core::Tensor& latent, std::span<const AttentionSeq> seqs) override;
  void mla_attention(const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& dims,
                     std::span<const AttentionSeq> seqs, core::Tensor& out) override;
  void mla_absorb_q(const core::Tensor& q, const LinearWeight& kv_b, const MlaDims& dims,
                    core::Tensor& q_full) override;
  void mla_attend_latent(const core::Tensor& q_full, const KvLayerView& cache, const MlaDims& dims,
                         std::span<const AttentionSeq> seqs, bool decode_step, core::Tensor& o_lat,
                         core::Tensor& lse) override;
  void mla_rank_weigh(core::Tensor& o_lat, const core::Tensor& lse, const core::Tensor& lse_all) override;
  void mla_up_v(const core::Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& dims,
                core::Tensor& out) override;
  void moe_route(const core::Tensor& x, const LinearWeight& gate, const core::Tensor& bias, const RouterConfig& cfg,
                 core::Tensor& ids, core::Tensor& weights) override;
  void moe_experts(const core::Tensor& x, const std::vector<ExpertWeights>& experts, const core::Tensor& ids,
                   const core::Tensor& weights, core::Tensor& out, const ExpertWeights* shared = nullptr) override;
  void gather_rows(const core::Tensor& x, std::span<const int64_t> rows, core::Tensor& out) override;
  void mask_logits(core::Tensor& logits, std::span<const uint32_t> bitmask) override;
  void sample(const core::Tensor& logits, std::span<const SampleRow> rows, core::Tensor& ids_out,
              core::Tensor* logprob_out) override;
  std::vector<float> to_host_f32(const core::Tensor& x) override;
  std::vector<int32_t> to_host_i32(const core::Tensor& x) override;
  std::vector<uint8_t> to_host_bytes(const core::Tensor& x) override;
  core::Tensor from_host_i32(core::Shape shape, const int32_t* data) override;
};

// Dot product with several accumulators (vectorisable without -ffast-math).
float dot(const float* a, const float* b, int64_t n);

// Whether `cache` holds fp8 e4m3 bytes (else fp32); throws naming `op` for any other element type
// or, for fp8, a scale that is not a positive finite number.
bool kv_is_fp8(const KvLayerView& cache, const char* op);
// Entry `row` (page_id * page_size + slot) of the cache as fp32: copied, or dequantized (q · scale).
void read_kv_entry(const KvLayerView& cache, int64_t row, float* dst);

}  // namespace tessera::ops::cpu
