#include "ops/perturbed_ops.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::ops {
namespace {

class PerturbedOps final : public ForwardingOps {
 public:
  PerturbedOps(std::unique_ptr<Ops> inner, std::string op)
      : ForwardingOps(*inner), owned_(std::move(inner)), op_(std::move(op)) {}

  std::string name() const override {
    return op_ == "none" ? owned_->name() : owned_->name() + " (test hook: " + op_ + " perturbed)";
  }

  void embedding(const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out) override {
    ForwardingOps::embedding(table, ids, out);
    perturb("embedding", out);
  }
  void rms_norm(const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
                int64_t col_begin) override {
    ForwardingOps::rms_norm(x, weight, eps, out, col_begin);
    perturb("rms_norm", out);
  }
  void linear(const core::Tensor& x, const LinearWeight& w, core::Tensor& out) override {
    ForwardingOps::linear(x, w, out);
    perturb("linear", out);
  }
  void linear_pair(const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1, const LinearWeight& w2,
                   core::Tensor& out2) override {
    ForwardingOps::linear_pair(x, w1, out1, w2, out2);
    perturb("linear_pair", out1);
  }
  void rms_norm_linear(const core::Tensor& x, const core::Tensor& norm_weight, float eps, const LinearWeight& w,
                       core::Tensor& out) override {
    ForwardingOps::rms_norm_linear(x, norm_weight, eps, w, out);
    perturb("rms_norm_linear", out);
  }
  void add_inplace(core::Tensor& x, const core::Tensor& y) override {
    ForwardingOps::add_inplace(x, y);
    perturb("add_inplace", x);
  }
  void add_rms_norm(core::Tensor& x, const core::Tensor& y, const core::Tensor& weight, float eps,
                    core::Tensor& out) override {
    ForwardingOps::add_rms_norm(x, y, weight, eps, out);
    perturb("add_rms_norm", out);
  }
  void silu_mul(const core::Tensor& gate, const core::Tensor& up, core::Tensor& out) override {
    ForwardingOps::silu_mul(gate, up, out);
    perturb("silu_mul", out);
  }
  void rope_inplace(core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override {
    ForwardingOps::rope_inplace(x, tables, col_begin, col_stride, count);
    perturb("rope_inplace", x);
  }
  void mla_prepare(core::Tensor& q, core::Tensor& latent, const core::Tensor& latent_norm, float eps,
                   const RopeTables& tables, const MlaDims& dims, KvLayerView& cache,
                   std::span<const AttentionSeq> seqs) override {
    ForwardingOps::mla_prepare(q, latent, latent_norm, eps, tables, dims, cache, seqs);
    perturb("mla_prepare", q);  // q feeds the attention; the latent is read back from the cache
  }
  void mla_attention(const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& dims,
                     std::span<const AttentionSeq> seqs, core::Tensor& out) override {
    ForwardingOps::mla_attention(q, cache, kv_b, dims, seqs, out);
    perturb("mla_attention", out);
  }
  void moe_route(const core::Tensor& x, const LinearWeight& gate, const core::Tensor& bias, const RouterConfig& cfg,
                 core::Tensor& ids, core::Tensor& weights) override {
    ForwardingOps::moe_route(x, gate, bias, cfg, ids, weights);
    perturb("moe_route", weights);
  }
  void moe_experts(const core::Tensor& x, const std::vector<ExpertWeights>& experts, const core::Tensor& ids,
                   const core::Tensor& weights, core::Tensor& out, const ExpertWeights* shared) override {
    ForwardingOps::moe_experts(x, experts, ids, weights, out, shared);
    perturb("moe_experts", out);
  }
  void moe(const core::Tensor& x, const LinearWeight& router, const core::Tensor& bias, const RouterConfig& cfg,
           const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, core::Tensor& out) override {
    ForwardingOps::moe(x, router, bias, cfg, experts, shared, out);
    perturb("moe", out);
  }

 private:
  // out += out, on the wrapped backend: an op of its own (so it also works inside a recorded CUDA
  // graph), with no host round trip.
  void perturb(const char* op, core::Tensor& out) {
    if (op_ == op) owned_->add_inplace(out, out);
  }

  std::unique_ptr<Ops> owned_;
  std::string op_;
};

}  // namespace

const std::vector<std::string>& perturbable_ops() {
  static const std::vector<std::string> v = {
      "embedding", "rms_norm",     "linear",      "linear_pair",   "rms_norm_linear", "add_inplace", "add_rms_norm",
      "silu_mul",  "rope_inplace", "mla_prepare", "mla_attention", "moe_route",       "moe_experts", "moe"};
  return v;
}

std::unique_ptr<Ops> make_perturbed_ops(std::unique_ptr<Ops> inner, const std::string& op) {
  const auto& ops = perturbable_ops();
  if (op != "none" && std::find(ops.begin(), ops.end(), op) == ops.end()) {
    std::string list = "none";
    for (const auto& o : ops) list += ", " + o;
    core::fail("--test-perturb-op '{}': not an op that can be perturbed ({})", op, list);
  }
  return std::make_unique<PerturbedOps>(std::move(inner), op);
}

}  // namespace tessera::ops
