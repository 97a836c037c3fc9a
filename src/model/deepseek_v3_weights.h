// The weights of a DeepSeek-V3-family language model, as views into the mapped checkpoint, found
// by name and checked against the config (shape, dtype, format and every scale tensor) before use.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "ops/ops.h"

namespace tessera::model {

struct AttentionWeights {
  std::optional<ops::LinearWeight> q_a, q_b, q;  // q_a/q_b with q-LoRA, q without
  core::Tensor q_a_norm;
  ops::LinearWeight kv_a, kv_b, o;
  core::Tensor kv_a_norm;
  // Calibrated KV scales (ModelOpt k_proj.k_scale / attn.k_scale ...), kept for FP8 caches.
  std::optional<float> k_scale, v_scale;
};

struct MoeWeights {
  ops::LinearWeight router;
  core::Tensor correction_bias;
  std::vector<ops::ExpertWeights> experts;
  std::optional<ops::ExpertWeights> shared;
};

struct LayerWeights {
  core::Tensor input_norm, post_attention_norm;
  AttentionWeights attn;
  bool is_moe = false;
  ops::ExpertWeights dense_mlp;  // when !is_moe
  MoeWeights moe;                // when is_moe
};

struct ModelWeights {
  core::Tensor embed;
  core::Tensor final_norm;
  ops::LinearWeight lm_head;
  std::vector<LayerWeights> layers;
  // Names of tensors in the checkpoint that the model does not use (other towers, MTP layers).
  std::vector<std::string> skipped;
};

// Calls table(embed), vector(t) for each 1-D tensor (norm weights, router biases) and linear(l, use)
// for each linear of `w` (a ModelWeights, const or not) with what the model uses it for, in one
// fixed order: the one walk of the weight tree that uploading, counting parameters and counting
// bytes share. lm_head is visited even when the checkpoint ties it to the embedding (then its
// weight shares the table's data).
template <class Weights, class Table, class Vector, class Linear>
void visit_weights(Weights& w, Table&& table, Vector&& vector, Linear&& linear) {
  using ops::LinearUse;
  auto mlp = [&](auto& m) {
    linear(m.gate, LinearUse::kProjection);
    linear(m.up, LinearUse::kProjection);
    linear(m.down, LinearUse::kProjection);
  };
  table(w.embed);
  vector(w.final_norm);
  linear(w.lm_head, LinearUse::kProjection);
  for (auto& L : w.layers) {
    vector(L.input_norm);
    vector(L.post_attention_norm);
    auto& A = L.attn;
    for (auto* l : {A.q_a ? &*A.q_a : nullptr, A.q_b ? &*A.q_b : nullptr, A.q ? &*A.q : nullptr, &A.kv_a, &A.o})
      if (l) linear(*l, LinearUse::kProjection);
    linear(A.kv_b, LinearUse::kAttentionKvB);
    if (A.q_a) vector(A.q_a_norm);
    vector(A.kv_a_norm);
    if (!L.is_moe) {
      mlp(L.dense_mlp);
      continue;
    }
    linear(L.moe.router, LinearUse::kRouter);
    vector(L.moe.correction_bias);
    for (auto& e : L.moe.experts) mlp(e);
    if (L.moe.shared) mlp(*L.moe.shared);
  }
}

// The linears of `w` by group (attention, kv_b, dense MLP, router, routed experts, shared experts,
// lm_head) and checkpoint format, in that order: what `tessera plan` reports and the backend's plan
// counts device bytes from. A tied lm_head is not counted (its data is the embedding's).
std::vector<ops::WeightGroup> linear_groups(const ModelWeights& w);

// Finds and validates every tensor the forward needs. Throws core::Error naming the tensor and
// its file on anything missing or inconsistent.
ModelWeights load_deepseek_v3_weights(const io::Checkpoint& ckpt, const io::ModelConfig& cfg,
                                      const io::QuantConfig& quant);

// The per-layer scales of an fp8 KV cache (fp8_kv_layer_scales of the layers' calibrated k/v scales);
// empty for other cache dtypes.
std::vector<float> kv_cache_scales(const ModelWeights& w, core::KvCacheDtype dtype);

// Loads one linear (module name without ".weight") in whatever format the checkpoint stores it.
ops::LinearWeight load_linear(const io::Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in,
                              const io::QuantConfig& quant);

}  // namespace tessera::model
