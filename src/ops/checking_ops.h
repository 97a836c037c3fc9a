// The op checker of the start-up self-check (model/self_check.h): an Ops decorator over the backend
// under test that, for every op call while checking is on, runs the op on that backend, copies the
// op's inputs (as they were before the call) to the host, runs the same op on the CPU reference
// backend with the weights the device weights were uploaded from, and compares the outputs
// (ops/deviation.h) against a per-op tolerance for a bf16 backend. Each op gets the backend's own
// inputs, so an error does not propagate: the first op that disagrees is the one at fault.
//
// Outside checking (set_context) every call is only forwarded, so the layers between the checked
// ones run as they do in production.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/deviation.h"
#include "ops/forwarding_ops.h"

namespace tessera::ops {

// The host weights (views into the mapped checkpoint) that the backend's weights were uploaded
// from, found by the backend tensor's data address (each upload makes its own tensor).
class HostWeights {
 public:
  void add_tensor(const core::Tensor& device, const core::Tensor& host);
  void add_linear(const LinearWeight& device, const LinearWeight& host);
  // Throw core::Error for a weight that was not added.
  const core::Tensor& tensor(const core::Tensor& device, const char* op) const;
  const LinearWeight& linear(const LinearWeight& device, const char* op) const;
  // The host list for a backend expert list (built once per list).
  const std::vector<ExpertWeights>& experts(const std::vector<ExpertWeights>& device, const char* op);
  ExpertWeights expert(const ExpertWeights& device, const char* op) const;

 private:
  std::map<const void*, core::Tensor> tensors_;
  std::map<const void*, LinearWeight> linears_;
  std::map<const void*, std::vector<ExpertWeights>> expert_lists_;
};

// One comparison: an output of one op call.
struct OpCheck {
  std::string op;      // the Ops virtual ("linear", "mla_attention", ...)
  std::string output;  // which of its outputs ("out", "q", "cache", "routing", "experts", ...)
  std::string weight;  // the linear's checkpoint name, when the op has one
  int64_t layer = -1;
  std::string step;  // "prefill of 16 tokens" / "decode of 1 token"
  bool decode_only = false;
  Deviation deviation;
  double tolerance = 0;
  std::string problem;  // a failure that is not a deviation (routing ids, a reference that refused)
  bool ok() const { return problem.empty() && deviation.max_rel <= tolerance; }
};

// Tolerances, of Deviation::max_rel, for a backend that rounds GEMM inputs to bf16 (the CUDA
// backend; the CPU backend under test meets them with 0). Measured errors are far below (bf16
// rounding of activations averages out over a dot product); a wrong kernel is off by O(1).
struct OpTolerances {
  double elementwise = 5e-3;  // fp32 ops: norms, residual adds, rope, silu, gathers
  double embedding = 1e-2;    // a table that is not bf16 is rounded to bf16 on upload
  double linear = 3e-2;       // bf16 GEMM inputs, fp32 accumulation; quantized weights dequantized exactly
  double attention = 5e-2;    // bf16 q and probabilities in the tensor-core kernels
  double experts = 3e-2;      // two bf16 GEMMs in a row per expert
  double routing_weights = 1e-2;
  double routing_tie = 1e-3;  // selection scores this close count as a tie (routing_check.h)
  // A KV cache entry relative to the reference's fp32 (bf16 cache: its rounding, 2^-9) or fp8 value
  // (both quantize nearly equal values, which may round one e4m3 step, up to 1/8, apart).
  double cache_bf16 = 1e-2, cache_fp8 = 0.15;
};

class CheckingOps final : public ForwardingOps {
 public:
  // `reference` is a backend in host memory (the CPU backend); `weights` maps the model's backend
  // weights to host ones.
  CheckingOps(Ops& under_test, Ops& reference, HostWeights& weights, OpTolerances tol = {});

  // Ops called from now on belong to `layer` of a step described by `step`; they are checked when
  // `check` is true, only forwarded otherwise.
  void set_context(int64_t layer, bool check, std::string step, bool decode_only);
  const std::vector<OpCheck>& checks() const { return checks_; }
  int64_t calls() const { return calls_; }  // op calls checked (an op may have several outputs)

  void embedding(const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out) override;
  void rms_norm(const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
                int64_t col_begin) override;
  void linear(const core::Tensor& x, const LinearWeight& w, core::Tensor& out) override;
  void linear_pair(const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1, const LinearWeight& w2,
                   core::Tensor& out2) override;
  void rms_norm_linear(const core::Tensor& x, const core::Tensor& norm_weight, float eps, const LinearWeight& w,
                       core::Tensor& out) override;
  void add_inplace(core::Tensor& x, const core::Tensor& y) override;
  void add_rms_norm(core::Tensor& x, const core::Tensor& y, const core::Tensor& weight, float eps,
                    core::Tensor& out) override;
  void silu_mul(const core::Tensor& gate, const core::Tensor& up, core::Tensor& out) override;
  void rope_inplace(core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override;
  void kv_cache_write(KvLayerView& cache, const core::Tensor& latent, std::span<const AttentionSeq> seqs) override;
  void mla_prepare(core::Tensor& q, core::Tensor& latent, const core::Tensor& latent_norm, float eps,
                   const RopeTables& tables, const MlaDims& dims, KvLayerView& cache,
                   std::span<const AttentionSeq> seqs) override;
  void mla_attention(const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& dims,
                     std::span<const AttentionSeq> seqs, core::Tensor& out) override;
  void moe_route(const core::Tensor& x, const LinearWeight& gate, const core::Tensor& bias, const RouterConfig& cfg,
                 core::Tensor& ids, core::Tensor& weights) override;
  void moe_experts(const core::Tensor& x, const std::vector<ExpertWeights>& experts, const core::Tensor& ids,
                   const core::Tensor& weights, core::Tensor& out, const ExpertWeights* shared) override;
  void moe(const core::Tensor& x, const LinearWeight& router, const core::Tensor& bias, const RouterConfig& cfg,
           const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, core::Tensor& out) override;
  void gather_rows(const core::Tensor& x, std::span<const int64_t> rows, core::Tensor& out) override;

 private:
  // A host copy of a backend float tensor as a reference tensor.
  core::Tensor ref_copy(const core::Tensor& t);
  // A host copy of a backend KV layer, as the reference reads it (bf16 widened to fp32, exactly).
  KvLayerView ref_cache(const KvLayerView& cache);
  // Empty reference pages of `cache`'s shape: fp8 when it is fp8 (with its scale), else fp32.
  KvLayerView ref_scratch_cache(const KvLayerView& cache);
  void compare(const char* op, const char* output, const core::Tensor& got, const core::Tensor& want, double tol,
               const std::string& weight = "");
  // The cache entries `seqs` wrote, in `cache` (backend) against `want` (reference).
  void compare_cache(const char* op, const KvLayerView& cache, const KvLayerView& want,
                     std::span<const AttentionSeq> seqs);
  // The backend's routing (ids, weights) of input x_ref (its host copy) against the reference router;
  // *ids_usable: whether its ids are in range (the experts' check can use them).
  void check_routing(const char* op, const core::Tensor& x_ref, const LinearWeight& gate, const core::Tensor& bias,
                     const RouterConfig& cfg, const core::Tensor& ids, const core::Tensor& weights, bool* ids_usable);
  OpCheck& record(const char* op, const char* output, const std::string& weight = "");

  Ops& ref_;
  HostWeights& weights_;
  OpTolerances tol_;
  int64_t layer_ = -1;
  bool check_ = false, decode_only_ = false;
  std::string step_;
  std::vector<OpCheck> checks_;
  int64_t calls_ = 0;
};

}  // namespace tessera::ops
