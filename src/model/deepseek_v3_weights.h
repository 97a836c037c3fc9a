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

// Finds and validates every tensor the forward needs. Throws core::Error naming the tensor and
// its file on anything missing or inconsistent.
ModelWeights load_deepseek_v3_weights(const io::Checkpoint& ckpt, const io::ModelConfig& cfg,
                                      const io::QuantConfig& quant);

// Loads one linear (module name without ".weight") in whatever format the checkpoint stores it.
ops::LinearWeight load_linear(const io::Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in,
                              const io::QuantConfig& quant);

}  // namespace tessera::model
