#include "ops/checking_ops.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/routing_check.h"

namespace tessera::ops {

using core::DType;
using core::Tensor;

// --- HostWeights

void HostWeights::add_tensor(const Tensor& device, const Tensor& host) { tensors_.emplace(device.raw(), host); }
void HostWeights::add_linear(const LinearWeight& device, const LinearWeight& host) {
  linears_.emplace(device.weight.raw(), host);
}

const Tensor& HostWeights::tensor(const Tensor& device, const char* op) const {
  auto it = tensors_.find(device.raw());
  TESSERA_CHECK(it != tensors_.end(),
                "self-check: {} was given a weight tensor {} that was not loaded from the checkpoint", op,
                core::shape_str(device.shape()));
  return it->second;
}

const LinearWeight& HostWeights::linear(const LinearWeight& device, const char* op) const {
  auto it = linears_.find(device.weight.raw());
  TESSERA_CHECK(it != linears_.end(), "self-check: {} was given linear '{}', which was not loaded from the checkpoint",
                op, device.name);
  return it->second;
}

ExpertWeights HostWeights::expert(const ExpertWeights& d, const char* op) const {
  return {linear(d.gate, op), linear(d.up, op), linear(d.down, op)};
}

const std::vector<ExpertWeights>& HostWeights::experts(const std::vector<ExpertWeights>& device, const char* op) {
  auto it = expert_lists_.find(device.data());
  if (it != expert_lists_.end()) return it->second;
  std::vector<ExpertWeights> host;
  host.reserve(device.size());
  for (const auto& e : device) host.push_back(expert(e, op));
  return expert_lists_.emplace(device.data(), std::move(host)).first->second;
}

// --- KV entries on the host

namespace {

// Entry `row` of pages of `dtype` ([pages * page_size, entry] bytes at `base`) as fp32 values.
void read_entry(DType dtype, const uint8_t* base, int64_t row, int64_t entry, float scale, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, base + row * entry * 4, static_cast<size_t>(entry) * 4);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < entry; ++i) {
        uint16_t v;
        std::memcpy(&v, base + (row * entry + i) * 2, 2);
        dst[i] = core::bf16_to_f32(v);
      }
      return;
    case DType::kU8:  // fp8 e4m3 with the layer's scale (KvLayerView)
      for (int64_t i = 0; i < entry; ++i) dst[i] = core::fp8_e4m3_to_f32(base[row * entry + i]) * scale;
      return;
    default:
      core::fail("self-check: KV pages of dtype {}", core::dtype_name(dtype));
  }
}

// The cache rows (page_id * page_size + slot) that `seqs` write.
std::vector<int64_t> written_rows(std::span<const AttentionSeq> seqs, int64_t page_size) {
  std::vector<int64_t> rows;
  for (const auto& s : seqs)
    for (int64_t p = s.start_pos; !s.block_table.empty() && p < s.start_pos + s.num_tokens; ++p)
      rows.push_back(s.block_table[static_cast<size_t>(p / page_size)] * page_size + p % page_size);
  return rows;
}

int64_t row_width(const Tensor& t) { return t.rank() >= 2 && t.dim(0) > 0 ? t.numel() / t.dim(0) : t.numel(); }

}  // namespace

// --- CheckingOps

CheckingOps::CheckingOps(Ops& under_test, Ops& reference, HostWeights& weights, OpTolerances tol)
    : ForwardingOps(under_test), ref_(reference), weights_(weights), tol_(tol) {}

void CheckingOps::set_context(int64_t layer, bool check, std::string step, bool decode_only) {
  layer_ = layer;
  check_ = check;
  step_ = std::move(step);
  decode_only_ = decode_only;
}

OpCheck& CheckingOps::record(const char* op, const char* output, const std::string& weight) {
  OpCheck c;
  c.op = op;
  c.output = output;
  c.weight = weight;
  c.layer = layer_;
  c.step = step_;
  c.decode_only = decode_only_;
  checks_.push_back(std::move(c));
  return checks_.back();
}

Tensor CheckingOps::ref_copy(const Tensor& t) {
  const std::vector<float> v = inner().to_host_f32(t);
  return ref_.from_host_f32(t.shape(), v.data());
}

KvLayerView CheckingOps::ref_cache(const KvLayerView& cache) {
  const std::vector<uint8_t> bytes = inner().to_host_bytes(cache.pages);
  KvLayerView v;
  v.page_size = cache.page_size;
  if (cache.pages.dtype() == DType::kU8) {
    v.pages = Tensor::zeros(DType::kU8, cache.pages.shape());
    std::memcpy(v.pages.raw(), bytes.data(), bytes.size());
    v.scale = cache.scale;
    return v;
  }
  // fp32 pages; a bf16 cache widened exactly, so the reference reads the values the backend reads.
  v.pages = Tensor::zeros(DType::kF32, cache.pages.shape());
  const int64_t entry = cache.pages.dim(2), rows = cache.pages.numel() / std::max<int64_t>(entry, 1);
  for (int64_t r = 0; r < rows; ++r)
    read_entry(cache.pages.dtype(), bytes.data(), r, entry, cache.scale, v.pages.data<float>() + r * entry);
  return v;
}

KvLayerView CheckingOps::ref_scratch_cache(const KvLayerView& cache) {
  KvLayerView v;
  v.page_size = cache.page_size;
  const bool fp8 = cache.pages.dtype() == DType::kU8;
  v.pages = Tensor::zeros(fp8 ? DType::kU8 : DType::kF32, cache.pages.shape());
  v.scale = fp8 ? cache.scale : 1.0f;
  return v;
}

void CheckingOps::compare(const char* op, const char* output, const Tensor& got, const Tensor& want, double tol,
                          const std::string& weight) {
  OpCheck& c = record(op, output, weight);
  c.tolerance = tol;
  if (got.numel() == 0) return;
  c.deviation = deviation(inner().to_host_f32(got), ref_.to_host_f32(want), row_width(want));
}

void CheckingOps::compare_cache(const char* op, const KvLayerView& cache, const KvLayerView& want,
                                std::span<const AttentionSeq> seqs) {
  OpCheck& c = record(op, "cache");
  const DType dtype = cache.pages.dtype();
  c.tolerance = dtype == DType::kBF16 ? tol_.cache_bf16 : dtype == DType::kU8 ? tol_.cache_fp8 : tol_.elementwise;
  const int64_t entry = cache.pages.dim(2);
  const std::vector<int64_t> rows = written_rows(seqs, cache.page_size);
  if (rows.empty()) return;
  const std::vector<uint8_t> bytes = inner().to_host_bytes(cache.pages);
  std::vector<float> got(rows.size() * static_cast<size_t>(entry)), ref(got.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    read_entry(dtype, bytes.data(), rows[i], entry, cache.scale, got.data() + i * entry);
    read_entry(want.pages.dtype(), static_cast<const uint8_t*>(want.pages.raw()), rows[i], entry, want.scale,
               ref.data() + i * entry);
  }
  c.deviation = deviation(got, ref, entry);
}

void CheckingOps::embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  ForwardingOps::embedding(table, ids, out);
  if (!check_) return;
  ++calls_;
  Tensor want = ref_.empty(out.shape());
  ref_.embedding(weights_.tensor(table, "embedding"), ids, want);
  compare("embedding", "out", out, want, tol_.embedding);
}

void CheckingOps::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t col_begin) {
  if (!check_) return ForwardingOps::rms_norm(x, weight, eps, out, col_begin);
  ++calls_;
  // In place (out is x) or into part of a row as wide as x: the reference starts from the same
  // contents as the backend's out.
  const bool in_place = out.raw() == x.raw();
  Tensor xr = ref_copy(x);
  Tensor outr = in_place ? xr : out.dim(1) == weight.numel() ? ref_.empty(out.shape()) : ref_copy(out);
  ForwardingOps::rms_norm(x, weight, eps, out, col_begin);
  ref_.rms_norm(xr, weights_.tensor(weight, "rms_norm"), eps, outr, col_begin);
  compare("rms_norm", "out", out, outr, tol_.elementwise);
}

void CheckingOps::linear(const Tensor& x, const LinearWeight& w, Tensor& out) {
  if (!check_) return ForwardingOps::linear(x, w, out);
  ++calls_;
  Tensor xr = ref_copy(x);
  ForwardingOps::linear(x, w, out);
  Tensor want = ref_.empty(out.shape());
  ref_.linear(xr, weights_.linear(w, "linear"), want);
  compare("linear", "out", out, want, tol_.linear, w.name);
}

void CheckingOps::linear_pair(const Tensor& x, const LinearWeight& w1, Tensor& out1, const LinearWeight& w2,
                              Tensor& out2) {
  if (!check_) return ForwardingOps::linear_pair(x, w1, out1, w2, out2);
  ++calls_;
  Tensor xr = ref_copy(x);
  ForwardingOps::linear_pair(x, w1, out1, w2, out2);
  Tensor want1 = ref_.empty(out1.shape()), want2 = ref_.empty(out2.shape());
  ref_.linear_pair(xr, weights_.linear(w1, "linear_pair"), want1, weights_.linear(w2, "linear_pair"), want2);
  compare("linear_pair", "out1", out1, want1, tol_.linear, w1.name);
  compare("linear_pair", "out2", out2, want2, tol_.linear, w2.name);
}

void CheckingOps::rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const LinearWeight& w,
                                  Tensor& out) {
  if (!check_) return ForwardingOps::rms_norm_linear(x, norm_weight, eps, w, out);
  ++calls_;
  Tensor xr = ref_copy(x);
  ForwardingOps::rms_norm_linear(x, norm_weight, eps, w, out);
  Tensor want = ref_.empty(out.shape());
  ref_.rms_norm_linear(xr, weights_.tensor(norm_weight, "rms_norm_linear"), eps, weights_.linear(w, "rms_norm_linear"),
                       want);
  compare("rms_norm_linear", "out", out, want, tol_.linear, w.name);
}

void CheckingOps::add_inplace(Tensor& x, const Tensor& y) {
  if (!check_) return ForwardingOps::add_inplace(x, y);
  ++calls_;
  Tensor xr = ref_copy(x), yr = ref_copy(y);
  ForwardingOps::add_inplace(x, y);
  ref_.add_inplace(xr, yr);
  compare("add_inplace", "x", x, xr, tol_.elementwise);
}

void CheckingOps::add_rms_norm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) {
  if (!check_) return ForwardingOps::add_rms_norm(x, y, weight, eps, out);
  ++calls_;
  Tensor xr = ref_copy(x), yr = ref_copy(y), outr = ref_.empty(out.shape());
  ForwardingOps::add_rms_norm(x, y, weight, eps, out);
  ref_.add_rms_norm(xr, yr, weights_.tensor(weight, "add_rms_norm"), eps, outr);
  compare("add_rms_norm", "residual", x, xr, tol_.elementwise);
  compare("add_rms_norm", "out", out, outr, tol_.elementwise);
}

void CheckingOps::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (!check_) return ForwardingOps::silu_mul(gate, up, out);
  ++calls_;
  Tensor gr = ref_copy(gate), ur = ref_copy(up), want = ref_.empty(out.shape());
  ForwardingOps::silu_mul(gate, up, out);
  ref_.silu_mul(gr, ur, want);
  compare("silu_mul", "out", out, want, tol_.elementwise);
}

void CheckingOps::rope_inplace(Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                               int64_t count) {
  if (!check_) return ForwardingOps::rope_inplace(x, tables, col_begin, col_stride, count);
  ++calls_;
  Tensor xr = ref_copy(x);
  const RopeTables tr{ref_copy(tables.cos), ref_copy(tables.sin)};
  ForwardingOps::rope_inplace(x, tables, col_begin, col_stride, count);
  ref_.rope_inplace(xr, tr, col_begin, col_stride, count);
  compare("rope_inplace", "x", x, xr, tol_.elementwise);
}

void CheckingOps::kv_cache_write(KvLayerView& cache, const Tensor& latent, std::span<const AttentionSeq> seqs) {
  if (!check_) return ForwardingOps::kv_cache_write(cache, latent, seqs);
  ++calls_;
  Tensor lr = ref_copy(latent);
  KvLayerView want = ref_scratch_cache(cache);
  ForwardingOps::kv_cache_write(cache, latent, seqs);
  ref_.kv_cache_write(want, lr, seqs);
  compare_cache("kv_cache_write", cache, want, seqs);
}

void CheckingOps::mla_prepare(Tensor& q, Tensor& latent, const Tensor& latent_norm, float eps, const RopeTables& tables,
                              const MlaDims& dims, KvLayerView& cache, std::span<const AttentionSeq> seqs) {
  if (!check_) return ForwardingOps::mla_prepare(q, latent, latent_norm, eps, tables, dims, cache, seqs);
  ++calls_;
  Tensor qr = ref_copy(q), lr = ref_copy(latent);
  const RopeTables tr{ref_copy(tables.cos), ref_copy(tables.sin)};
  KvLayerView want = ref_scratch_cache(cache);
  ForwardingOps::mla_prepare(q, latent, latent_norm, eps, tables, dims, cache, seqs);
  ref_.mla_prepare(qr, lr, weights_.tensor(latent_norm, "mla_prepare"), eps, tr, dims, want, seqs);
  compare("mla_prepare", "q", q, qr, tol_.elementwise);
  compare("mla_prepare", "latent", latent, lr, tol_.elementwise);
  compare_cache("mla_prepare", cache, want, seqs);
}

void CheckingOps::mla_attention(const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                                const MlaDims& dims, std::span<const AttentionSeq> seqs, Tensor& out) {
  if (!check_) return ForwardingOps::mla_attention(q, cache, kv_b, dims, seqs, out);
  ++calls_;
  // The reference attends over the backend's own cache (bf16 widened exactly, fp8 as its bytes).
  Tensor qr = ref_copy(q);
  const KvLayerView cr = ref_cache(cache);
  ForwardingOps::mla_attention(q, cache, kv_b, dims, seqs, out);
  Tensor want = ref_.empty(out.shape());
  ref_.mla_attention(qr, cr, weights_.linear(kv_b, "mla_attention"), dims, seqs, want);
  compare("mla_attention", "out", out, want, tol_.attention, kv_b.name);
}

void CheckingOps::check_routing(const char* op, const Tensor& x_ref, const LinearWeight& gate, const Tensor& bias,
                                const RouterConfig& cfg, const Tensor& ids, const Tensor& weights, bool* ids_usable) {
  const int64_t T = x_ref.dim(0);
  Tensor logits = ref_.empty({T, cfg.experts});
  ref_.linear(x_ref, weights_.linear(gate, op), logits);
  const Tensor& host_bias = weights_.tensor(bias, op);
  std::vector<float> b(static_cast<size_t>(host_bias.numel()));
  core::convert_to_f32(host_bias.dtype(), host_bias.raw(), b.data(), b.size());
  const std::vector<int32_t> id = inner().to_host_i32(ids);
  const RoutingCheck rc =
      ops::check_routing(ref_.to_host_f32(logits), b, cfg, id, inner().to_host_f32(weights), tol_.routing_tie);
  OpCheck& c = record(op, "routing", gate.name);
  c.problem = rc.problem;
  c.deviation = rc.weights;
  c.tolerance = tol_.routing_weights;
  *ids_usable = std::all_of(id.begin(), id.end(), [&](int32_t e) { return e >= 0 && e < cfg.experts; });
}

void CheckingOps::moe_route(const Tensor& x, const LinearWeight& gate, const Tensor& bias, const RouterConfig& cfg,
                            Tensor& ids, Tensor& weights) {
  if (!check_) return ForwardingOps::moe_route(x, gate, bias, cfg, ids, weights);
  ++calls_;
  Tensor xr = ref_copy(x);
  ForwardingOps::moe_route(x, gate, bias, cfg, ids, weights);
  bool usable = false;
  check_routing("moe_route", xr, gate, bias, cfg, ids, weights, &usable);
}

void CheckingOps::moe_experts(const Tensor& x, const std::vector<ExpertWeights>& experts, const Tensor& ids,
                              const Tensor& weights, Tensor& out, const ExpertWeights* shared) {
  if (!check_) return ForwardingOps::moe_experts(x, experts, ids, weights, out, shared);
  ++calls_;
  Tensor xr = ref_copy(x);
  const std::vector<int32_t> id = inner().to_host_i32(ids);
  ForwardingOps::moe_experts(x, experts, ids, weights, out, shared);
  const int64_t E = static_cast<int64_t>(experts.size());
  if (!std::all_of(id.begin(), id.end(), [&](int32_t e) { return e >= 0 && e < E; })) {
    record("moe_experts", "out").problem = "the expert ids it was given are out of range";
    return;
  }
  Tensor idr = ref_.from_host_i32(ids.shape(), id.data()), wr = ref_copy(weights), want = ref_.empty(out.shape());
  const ExpertWeights host_shared = shared ? weights_.expert(*shared, "moe_experts") : ExpertWeights{};
  ref_.moe_experts(xr, weights_.experts(experts, "moe_experts"), idr, wr, want, shared ? &host_shared : nullptr);
  compare("moe_experts", "out", out, want, tol_.experts);
}

void CheckingOps::moe(const Tensor& x, const LinearWeight& router, const Tensor& bias, const RouterConfig& cfg,
                      const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, Tensor& out) {
  if (!check_) return ForwardingOps::moe(x, router, bias, cfg, experts, shared, out);
  ++calls_;
  Tensor xr = ref_copy(x);
  ForwardingOps::moe(x, router, bias, cfg, experts, shared, out);  // the backend's whole block
  // The block's routing is not an output: the backend's router runs once more on the same input (the
  // kernel the block ran), and the reference's experts are given the backend's routing, so that a
  // near-tie routed either way is not an error of the experts.
  const int64_t T = x.dim(0);
  Tensor ids = inner().empty_i32({T, cfg.top_k}), weights = inner().empty({T, cfg.top_k});
  inner().moe_route(x, router, bias, cfg, ids, weights);
  bool usable = false;
  check_routing("moe", xr, router, bias, cfg, ids, weights, &usable);
  if (!usable) return;
  const std::vector<int32_t> id = inner().to_host_i32(ids);
  Tensor idr = ref_.from_host_i32(ids.shape(), id.data()), wr = ref_copy(weights), want = ref_.empty(out.shape());
  const ExpertWeights host_shared = shared ? weights_.expert(*shared, "moe") : ExpertWeights{};
  ref_.moe_experts(xr, weights_.experts(experts, "moe"), idr, wr, want, shared ? &host_shared : nullptr);
  compare("moe", "experts", out, want, tol_.experts);
}

void CheckingOps::gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) {
  if (!check_) return ForwardingOps::gather_rows(x, rows, out);
  ++calls_;
  Tensor xr = ref_copy(x), want = ref_.empty(out.shape());
  ForwardingOps::gather_rows(x, rows, out);
  ref_.gather_rows(xr, rows, want);
  compare("gather_rows", "out", out, want, tol_.elementwise);
}

}  // namespace tessera::ops
