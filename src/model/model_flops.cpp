#include "model/model_flops.h"

#include "core/error.h"

namespace tessera::model {

PrefillFlops prefill_flops(const io::ModelConfig& c, int64_t prompt_len) {
  TESSERA_CHECK(prompt_len >= 0, "prefill_flops: prompt length {} is negative", prompt_len);
  const double H = static_cast<double>(c.hidden_size), N = static_cast<double>(c.num_attention_heads);
  const double qk = static_cast<double>(c.qk_head_dim()), v = static_cast<double>(c.v_head_dim);
  const double nope = static_cast<double>(c.qk_nope_head_dim), rope = static_cast<double>(c.qk_rope_head_dim);
  const double kv_lora = static_cast<double>(c.kv_lora_rank), q_lora = static_cast<double>(c.q_lora_rank);
  // Multiply-adds per token of one layer's attention projections.
  const double q = c.q_lora_rank > 0 ? H * q_lora + q_lora * N * qk : H * N * qk;
  const double attn_proj = q + H * (kv_lora + rope) + kv_lora * N * (nope + v) + N * v * H;
  const double dense_mlp = 3 * H * static_cast<double>(c.intermediate_size);
  const double moe_inter = static_cast<double>(c.moe_intermediate_size);
  const double moe_mlp = H * static_cast<double>(c.n_routed_experts) +
                         3 * H * moe_inter * static_cast<double>(c.n_shared_experts + c.num_experts_per_tok);
  double per_token = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
    per_token += attn_proj + (c.is_moe_layer(layer) ? moe_mlp : dense_mlp);
  const double L = static_cast<double>(prompt_len);
  const double pairs = L * (L + 1) / 2;  // (query, key) pairs of the causal prompt
  PrefillFlops f;
  f.linear = 2 * L * per_token;
  f.attention = 2 * pairs * N * (qk + v) * static_cast<double>(c.num_hidden_layers);
  f.lm_head = prompt_len > 0 ? 2 * H * static_cast<double>(c.vocab_size) : 0;
  return f;
}

}  // namespace tessera::model
