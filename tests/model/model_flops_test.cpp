// Model FLOPs of a prefill (model_flops.h), against numbers worked out by hand for a small config,
// and against the published size of Kimi-K2 (32B parameters active per token).
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_flops.h"
#include "model/synthetic.h"

namespace tessera {
namespace {

// hidden 8, 2 heads (nope 2 + rope 2, v 3), q_lora 3, kv_lora 4; layer 0 dense (intermediate 6),
// layer 1 MoE (4 experts of 3, top 2, one shared); vocab 10.
io::ModelConfig small() {
  io::ModelConfig c;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 3;
  c.q_lora_rank = 3;
  c.kv_lora_rank = 4;
  c.num_hidden_layers = 2;
  c.first_k_dense_replace = 1;
  c.intermediate_size = 6;
  c.moe_intermediate_size = 3;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.vocab_size = 10;
  return c;
}

TEST(ModelFlops, SmallConfigByHand) {
  // Per token, multiply-adds: q_a 8*3 = 24 + q_b 3*(2*4) = 24; kv_a 8*(4+2) = 48; kv_b 4*2*(2+3) =
  // 40; o 2*3*8 = 48: attention 184. Dense MLP 3*8*6 = 144. MoE: router 8*4 = 32 + 3 experts (1
  // shared + 2 routed) 3*8*3 each = 216: 248. Layers: (184 + 144) + (184 + 248) = 760.
  // 3 tokens: linear 2*3*760 = 4560; attention: 3*4/2 = 6 pairs x 2 heads x (4 + 3) x 2 layers x 2 =
  // 336; lm_head 2*8*10 = 160.
  const model::PrefillFlops f = model::prefill_flops(small(), 3);
  EXPECT_DOUBLE_EQ(f.linear, 4560);
  EXPECT_DOUBLE_EQ(f.attention, 336);
  EXPECT_DOUBLE_EQ(f.lm_head, 160);
  EXPECT_DOUBLE_EQ(f.total(), 5056);
  // Without q-LoRA: q_proj 8*(2*4) = 64 instead of 48 per layer: +16 x 2 layers x 3 tokens x 2.
  io::ModelConfig c = small();
  c.q_lora_rank = 0;
  EXPECT_DOUBLE_EQ(model::prefill_flops(c, 3).linear, 4560 + 192);
  EXPECT_DOUBLE_EQ(model::prefill_flops(c, 0).total(), 0);
  EXPECT_THROW(model::prefill_flops(c, -1), core::Error);
}

TEST(ModelFlops, KimiK2ActiveParametersMatchThePublishedSize) {
  // Kimi-K2 activates "32B" parameters a token. Counted here: per layer 101M of attention
  // projections and 399M of MoE (router + 9 experts of 3 x 7168 x 2048); the first layer dense
  // (3 x 7168 x 18432): 30.5B, and 32.9B with the embedding and lm_head (1.17B each): 61 GFLOP.
  io::ModelConfig c = model::synthetic_config("kimi-k2.5", 61);
  c.first_k_dense_replace = 1;  // as the real checkpoint (the synthetic preset makes every layer MoE)
  const double per_token = model::prefill_flops(c, 1).linear;
  EXPECT_GT(per_token, 59e9);
  EXPECT_LT(per_token, 63e9);
  // Attention grows with the square of the prompt: 4096 tokens carry 4096 x 4097 / 2 pairs.
  const model::PrefillFlops f = model::prefill_flops(c, 4096);
  EXPECT_DOUBLE_EQ(f.attention, 2.0 * 4096 * 4097 / 2 * 64 * (192 + 128) * 61);
}

}  // namespace
}  // namespace tessera
