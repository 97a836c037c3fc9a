// The language-model configuration of a DeepSeek-V3-family checkpoint, parsed from config.json:
// DeepseekV3ForCausalLM (model_type deepseek_v3 or kimi_k2) and KimiK25ForConditionalGeneration
// (fields under text_config, tensors under "language_model."). Values the forward cannot honour
// are refused here, with the field named, before any weight is read.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::io {

struct RopeConfig {
  enum class Type { kDefault, kYarn };
  Type type = Type::kDefault;
  double theta = 10000.0;
  // YaRN (shared/reference/deepseek_v3_spec.md §2.5)
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  std::optional<double> attention_factor;
  bool truncate = true;
};

struct ModelConfig {
  std::string architecture;  // the HF architectures[0] name
  std::string model_type;    // of the language model (deepseek_v3, kimi_k2)
  // Prefix of language-model tensor names in the checkpoint ("" or "language_model.").
  std::string weight_prefix;
  // Tensor-name prefixes that belong to other towers (vision, projector) and are skipped.
  std::vector<std::string> skipped_prefixes;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;  // 0: no q-LoRA (q_proj)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double rms_norm_eps = 1e-6;
  // Epsilon of q_a_layernorm / kv_a_layernorm. transformers (<= 5.17, the reference) builds these
  // norms without passing rms_norm_eps, so they use 1e-6 whatever the config says (spec §5.3).
  double latent_norm_eps = 1e-6;
  std::string latent_norm_eps_source = "transformers reference default (spec §5.3)";
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  RopeConfig rope;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  int64_t num_nextn_predict_layers = 0;  // MTP layers present in the checkpoint, not used

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }
  // Width of one latent KV-cache entry: [c_kv | k_pe].
  int64_t kv_cache_entry_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // Softmax scale of MLA attention (spec §2.6).
  double softmax_scale() const;
  // The cos/sin multiplier of YaRN (spec §2.5); 1 without scaling.
  double rope_attention_factor() const;
  // Inverse frequencies, computed in fp32 the way transformers does (spec §2.5).
  std::vector<float> rope_inv_freq() const;
  // Parameters of the language model as the config describes it (no checkpoint needed).
  uint64_t parameter_count() const;
  // Of those, the parameters of 1-D tensors (norm weights, router biases): backends keep them in
  // fp32 while matrices may be bf16 or narrower.
  uint64_t vector_parameter_count() const;
};

// Parses `config_json` (the whole config.json). `where` names the file for messages.
ModelConfig parse_model_config(const nlohmann::json& config_json, const std::string& where);
// Reads <dir>/config.json.
ModelConfig load_model_config(const std::filesystem::path& dir);

}  // namespace tessera::io
