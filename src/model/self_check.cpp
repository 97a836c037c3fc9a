#include "model/self_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "model/deepseek_v3.h"
#include "model/deepseek_v3_weights.h"
#include "ops/cpu/cpu_ops.h"

namespace tessera::model {
namespace {

// Pairs each of the model's backend weights with the mapped checkpoint tensor it was uploaded from:
// the same walk of the same weight tree (visit_weights) over both.
ops::HostWeights pair_weights(const ModelWeights& device, const ModelWeights& host) {
  std::vector<const core::Tensor*> dt, ht;
  std::vector<const ops::LinearWeight*> dl, hl;
  auto collect = [](const ModelWeights& w, auto& tensors, auto& linears) {
    auto tensor = [&](const core::Tensor& t) { tensors.push_back(&t); };
    visit_weights(w, tensor, tensor, [&](const ops::LinearWeight& l, ops::LinearUse) { linears.push_back(&l); });
  };
  collect(device, dt, dl);
  collect(host, ht, hl);
  TESSERA_CHECK(dt.size() == ht.size() && dl.size() == hl.size(),
                "self-check: the checkpoint has {} tensors and {} linears, the loaded model {} and {}", ht.size(),
                hl.size(), dt.size(), dl.size());
  ops::HostWeights w;
  for (size_t i = 0; i < dt.size(); ++i) w.add_tensor(*dt[i], *ht[i]);
  for (size_t i = 0; i < dl.size(); ++i) w.add_linear(*dl[i], *hl[i]);
  return w;
}

std::vector<int64_t> default_layers(const ModelWeights& w) {
  std::vector<int64_t> layers;
  if (w.layers.empty()) return layers;
  layers.push_back(0);
  for (size_t l = 0; l < w.layers.size(); ++l)
    if (w.layers[l].is_moe) {
      if (l > 0) layers.push_back(static_cast<int64_t>(l));
      break;
    }
  return layers;
}

std::string layer_list(const std::vector<int64_t>& layers) {
  if (layers.size() == 1) return fmt::format("layer {}", layers[0]);
  std::string s = "layers ";
  for (size_t i = 0; i < layers.size(); ++i)
    s += fmt::format("{}{}", i == 0 ? "" : i + 1 == layers.size() ? " and " : ", ", layers[i]);
  return s;
}

// "op linear (kernel: ...) on layer 0, prefill of 16 tokens, weight ...o_proj"
std::string where(const ops::OpCheck& c, const std::string& kernel = "") {
  std::string s = "op " + c.op;
  if (!kernel.empty()) s += fmt::format(" (kernel: {})", kernel);
  s += fmt::format(" on layer {}, {}", c.layer, c.step);
  if (!c.weight.empty()) s += ", weight " + c.weight;
  if (c.output != "out") s += ", output " + c.output;
  return s;
}

}  // namespace

std::string plan_row_of(const ops::OpCheck& c) {
  const std::string& op = c.op;
  if (op == "embedding") return "embedding";
  if (op == "rms_norm" || op == "add_rms_norm") return "rms_norm";
  if (op == "linear" || op == "linear_pair" || op == "rms_norm_linear") return "linear";
  if (op == "mla_prepare" || op == "kv_cache_write" || op == "rope_inplace") return "mla prepare";
  if (op == "mla_attention") return c.decode_only ? "mla decode" : "mla prefill";
  if (op == "moe_route" || (op == "moe" && c.output == "routing")) return "moe router";
  if (op == "moe_experts" || op == "moe") return "moe experts";
  return "";
}

SelfCheckReport self_check(LoadedModel& m, const SelfCheckOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto* model = dynamic_cast<DeepseekV3Model*>(m.model.get());
  TESSERA_CHECK(model != nullptr && m.checkpoint != nullptr,
                "self-check: needs a DeepseekV3Model loaded from a checkpoint (its mapped tensors are the reference's "
                "weights)");
  TESSERA_CHECK(options.prompt_tokens >= 1, "self-check: a prompt of {} tokens", options.prompt_tokens);
  const io::ModelConfig& cfg = m.config;
  SelfCheckReport r;
  r.prompt_tokens = options.prompt_tokens;
  r.layers = options.layers.empty() ? default_layers(model->weights()) : options.layers;
  std::sort(r.layers.begin(), r.layers.end());
  r.layers.erase(std::unique(r.layers.begin(), r.layers.end()), r.layers.end());
  TESSERA_CHECK(!r.layers.empty() && r.layers.front() >= 0 && r.layers.back() < cfg.num_hidden_layers,
                "self-check: layers to check must lie in [0, {})", cfg.num_hidden_layers);

  // The reference's weights: the checkpoint's tensors as mapped (exact, any format).
  const ModelWeights host = load_deepseek_v3_weights(*m.checkpoint, cfg, m.quant);
  ops::HostWeights weights = pair_weights(model->weights(), host);
  ops::cpu::CpuOps reference;
  ops::CheckingOps checker(model->ops(), reference, weights);

  // A fixed prompt, then one decode token, in a cache of its own. The prompt's first half are ids
  // spread over the vocabulary, its second half one id repeated: tokens that route alike, so that
  // some routed experts get several tokens (the grouped kernels run, not only the one-pair
  // matrix-vector ones) and fewer distinct experts need dequantizing on the CPU.
  const int64_t P = options.prompt_tokens;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i <= P; ++i) {
    const int64_t k = i < (P + 1) / 2 || i == P ? i : P + 1;
    ids.push_back(static_cast<int32_t>((k * 7919 + 17) % cfg.vocab_size));
  }
  const int64_t pages = pages_for_tokens(P + 1);
  KvCache cache = m.make_kv_cache(pages);
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t p = 0; p < pages; ++p) table[static_cast<size_t>(p)] = static_cast<int32_t>(p);

  const int64_t run_layers = r.layers.back() + 1;
  auto run = [&](std::vector<int32_t> tokens, int64_t start, const std::string& step, bool decode_only) {
    StepBatch b;
    b.seqs.push_back({start, static_cast<int64_t>(tokens.size()), table, false});
    b.token_ids = std::move(tokens);
    model->forward_layers(checker, b, cache, run_layers, [&](int64_t l) {
      checker.set_context(l, std::binary_search(r.layers.begin(), r.layers.end(), l), step, decode_only);
    });
  };
  // A one-token prompt is a decode-only step, which runs the decode kernels.
  run(std::vector<int32_t>(ids.begin(), ids.begin() + P), 0,
      P > 1 ? fmt::format("prefill of {} tokens", P) : "decode of 1 token", P == 1);
  run({ids[static_cast<size_t>(P)]}, P, "decode of 1 token", true);

  r.checks = checker.checks();
  r.op_calls = checker.calls();
  for (const auto& c : r.checks)
    if (!c.ok()) {
      r.failure = c;
      break;
    }
  if (r.failure) {
    // The kernel the backend's plan names for this op, and the choices that avoid it.
    const ops::BackendPlan plan = model->ops().plan(cfg, m.kv_cache.dtype);
    const std::string row = plan_row_of(*r.failure);
    for (const auto& k : plan.kernels)
      if (k.op == row || (r.kernel.empty() && k.op == "every op")) {
        r.kernel = k.kernel;
        r.alternatives = k.alternatives;
      }
    if (r.kernel.empty()) r.kernel = fmt::format("the {} backend's elementwise kernel", model->ops().name());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string SelfCheckReport::summary() const {
  const std::string what =
      fmt::format("{} op calls on {} ({})", op_calls, layer_list(layers),
                  prompt_tokens > 1 ? fmt::format("prefill of {} tokens, decode of 1", prompt_tokens)
                                    : std::string("two decode steps of 1 token"));
  if (failure) return fmt::format("self-check: {}: {}, {:.1f} s", what, error(), seconds);
  // The output closest to its tolerance says how much room there was.
  const ops::OpCheck* closest = nullptr;
  for (const auto& c : checks)
    if (c.tolerance > 0 &&
        (!closest || c.deviation.max_rel / c.tolerance > closest->deviation.max_rel / closest->tolerance))
      closest = &c;
  const std::string margin = !closest || closest->deviation.max_rel == 0
                                 ? " (every output equal to the reference's)"
                                 : fmt::format(" (largest relative error {:.2g} against a tolerance of {:.2g}: {})",
                                               closest->deviation.max_rel, closest->tolerance, where(*closest));
  return fmt::format("self-check: {} agree with the CPU reference{}, {:.1f} s", what, margin, seconds);
}

std::string SelfCheckReport::error() const {
  if (!failure) return "";
  const ops::OpCheck& c = *failure;
  const std::string how =
      !c.problem.empty() ? c.problem : fmt::format("{} > {:.2g}", c.deviation.describe(), c.tolerance);
  std::string avoid = "no --kernels choice avoids this kernel; run with --skip-self-check to start anyway";
  if (!alternatives.empty()) {
    avoid = fmt::format("run with --kernels {}", alternatives[0]);
    if (alternatives.size() > 1)
      avoid += fmt::format(" (or {})", fmt::join(alternatives.begin() + 1, alternatives.end(), ", "));
    avoid += " to avoid this kernel, or --skip-self-check to start anyway";
  }
  return fmt::format("self-check failed: {}: differs from the CPU reference: {}; {}", where(c, kernel), how, avoid);
}

}  // namespace tessera::model
