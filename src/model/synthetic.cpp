#include "model/synthetic.h"

#include <cmath>

#include "core/error.h"
#include "model/kv_shard.h"
#include "model/tensor_parallel.h"

namespace tessera::model {

namespace {

io::ModelConfig kimi_k25() {
  // shared/reference/deepseek_v3_spec.md §8 (Kimi-K2-0905 / K2.5 text).
  io::ModelConfig c;
  c.architecture = "DeepseekV3ForCausalLM";
  c.model_type = "kimi_k2";
  c.vocab_size = 163840;
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_attention_heads = 64;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 384;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 8;
  c.n_group = 1;
  c.topk_group = 1;
  c.routed_scaling_factor = 2.827;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 262144;
  c.rope.type = io::RopeConfig::Type::kYarn;
  c.rope.theta = 50000;
  c.rope.factor = 64;
  c.rope.original_max_position_embeddings = 4096;
  c.rope.beta_fast = 1;
  c.rope.beta_slow = 1;
  c.rope.mscale = 1;
  c.rope.mscale_all_dim = 1;
  return c;
}

io::ModelConfig deepseek_v3() {
  io::ModelConfig c = kimi_k25();
  c.model_type = "deepseek_v3";
  c.vocab_size = 129280;
  c.num_attention_heads = 128;
  c.n_routed_experts = 256;
  c.n_group = 8;
  c.topk_group = 4;
  c.routed_scaling_factor = 2.5;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 163840;
  c.rope.theta = 10000;
  c.rope.factor = 40;
  c.rope.beta_fast = 32;
  return c;
}

io::ModelConfig tiny() {
  // The shapes of the dsv3-tiny fixture.
  io::ModelConfig c = deepseek_v3();
  c.vocab_size = 1024;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.moe_intermediate_size = 128;
  c.num_attention_heads = 4;
  c.q_lora_rank = 96;
  c.kv_lora_rank = 64;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 16;
  c.v_head_dim = 32;
  c.n_routed_experts = 16;
  c.num_experts_per_tok = 4;
  c.n_group = 4;
  c.topk_group = 2;
  c.max_position_embeddings = 4096;
  c.rope.factor = 8;
  c.rope.original_max_position_embeddings = 512;
  return c;
}

}  // namespace

std::vector<std::string> synthetic_presets() { return {"kimi-k2.5", "deepseek-v3", "tiny"}; }

io::ModelConfig synthetic_config(const std::string& preset, int64_t layers) {
  io::ModelConfig c;
  if (preset == "kimi-k2.5") {
    c = kimi_k25();
  } else if (preset == "deepseek-v3") {
    c = deepseek_v3();
  } else if (preset == "tiny") {
    c = tiny();
  } else {
    core::fail("--synthetic '{}': expected one of kimi-k2.5, deepseek-v3, tiny", preset);
  }
  TESSERA_CHECK(layers >= 1, "--layers {}: at least one layer", layers);
  c.num_hidden_layers = layers;
  c.first_k_dense_replace = 0;
  c.norm_topk_prob = true;
  c.latent_norm_eps = 1e-6;
  return c;
}

SyntheticFormat parse_synthetic_format(const std::string& name) {
  if (name == "bf16") return SyntheticFormat::kBf16;
  if (name == "fp8") return SyntheticFormat::kFp8;
  if (name == "nvfp4") return SyntheticFormat::kNvfp4;
  core::fail("--weights '{}': expected bf16, fp8 or nvfp4", name);
}

std::string synthetic_format_name(SyntheticFormat f) {
  switch (f) {
    case SyntheticFormat::kBf16:
      return "bf16";
    case SyntheticFormat::kFp8:
      return "fp8 (DeepSeek-V3 128x128 blocks; router and lm_head bf16)";
    case SyntheticFormat::kNvfp4:
      return "nvfp4 (Kimi-K2.5: routed experts NVFP4, the rest bf16)";
  }
  return "?";
}

ModelWeights synthetic_weights(const io::ModelConfig& c, ops::Ops& ops, const RandomTensors& random,
                               SyntheticFormat format, TensorParallel tp) {
  check_tensor_parallel(c, tp.size);
  using Format = ops::LinearWeight::Format;
  auto linear_as = [&](const std::string& name, int64_t out, int64_t in, Format f) {
    ops::LinearWeight w;
    w.format = f;
    w.name = name;
    w.out = out;
    w.in = in;
    const float target = 1.0f / std::sqrt(static_cast<float>(in));
    if (f == Format::kDense) {
      w.weight = random.bf16({out, in}, target);
    } else if (f == Format::kFp8Block) {
      // e4m3 codes with the top exponent bit clear: |v| < 2, never NaN; std ~0.5 before the scale.
      w.weight = random.bytes({out, in}, 0xbf, 0);
      const int64_t sr = (out + 127) / 128, sc = (in + 127) / 128;
      std::vector<float> scale(static_cast<size_t>(sr * sc), 2.0f * target);
      w.scale = ops.from_host_f32({sr, sc}, scale.data());
    } else {
      // Any e2m1 code (|v| <= 6, std ~2.9), block scales e4m3 1.0 (0x38), the global scale sizing.
      w.weight = random.bytes({out, in / 2}, 0xff, 0);
      w.scale = random.bytes({out, in / 16}, 0, 0x38);
      w.global_scale = target / 2.9f;
    }
    return w;
  };
  const Format dense = format == SyntheticFormat::kFp8 ? Format::kFp8Block : Format::kDense;
  const Format routed = format == SyntheticFormat::kFp8     ? Format::kFp8Block
                        : format == SyntheticFormat::kNvfp4 ? Format::kNvfp4
                                                            : Format::kDense;
  auto linear = [&](const std::string& name, int64_t out, int64_t in) { return linear_as(name, out, in, dense); };
  auto vector = [&](int64_t n, float value) {
    std::vector<float> v(static_cast<size_t>(n), value);
    return ops.from_host_f32({n}, v.data());
  };
  // Split MLPs (dense, shared) keep this rank's intermediate columns; routed experts are whole.
  auto part = [&](int64_t n) {
    const auto [b, e] = tp.range(n);
    return e - b;
  };
  auto mlp = [&](const std::string& name, int64_t inter, Format f) {
    return ops::ExpertWeights{linear_as(name + ".gate_proj", inter, c.hidden_size, f),
                              linear_as(name + ".up_proj", inter, c.hidden_size, f),
                              linear_as(name + ".down_proj", c.hidden_size, inter, f)};
  };
  const int64_t H = c.hidden_size, N = part(c.num_attention_heads);  // this rank's heads
  ModelWeights w;
  w.embed = random.bf16({c.vocab_size, H}, 1.0f);
  w.final_norm = vector(H, 1.0f);
  w.lm_head = linear_as("lm_head", part(c.vocab_size), H, Format::kDense);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    LayerWeights L;
    L.input_norm = vector(H, 1.0f);
    L.post_attention_norm = vector(H, 1.0f);
    auto& A = L.attn;
    if (c.q_lora_rank > 0) {
      A.q_a = linear(p + ".self_attn.q_a_proj", c.q_lora_rank, H);
      A.q_a_norm = vector(c.q_lora_rank, 1.0f);
      A.q_b = linear(p + ".self_attn.q_b_proj", N * c.qk_head_dim(), c.q_lora_rank);
    } else {
      A.q = linear(p + ".self_attn.q_proj", N * c.qk_head_dim(), H);
    }
    A.kv_a = linear(p + ".self_attn.kv_a_proj_with_mqa", c.kv_cache_entry_dim(), H);
    A.kv_a_norm = vector(c.kv_lora_rank, 1.0f);
    A.kv_b = linear(p + ".self_attn.kv_b_proj", N * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    A.o = linear(p + ".self_attn.o_proj", H, N * c.v_head_dim);
    L.is_moe = c.is_moe_layer(l);
    if (!L.is_moe) {
      L.dense_mlp = mlp(p + ".mlp", part(c.intermediate_size), dense);
    } else {
      L.moe.router = linear_as(p + ".mlp.gate", c.n_routed_experts, H, Format::kDense);
      L.moe.correction_bias = vector(c.n_routed_experts, 0.0f);
      for (int64_t e = 0; e < c.n_routed_experts; ++e)
        L.moe.experts.push_back(tp.holds_expert(e)
                                    ? mlp(p + ".mlp.experts." + std::to_string(e), c.moe_intermediate_size, routed)
                                    : ops::ExpertWeights{});  // another rank's
      if (c.n_shared_experts > 0)
        L.moe.shared = mlp(p + ".mlp.shared_experts", part(c.n_shared_experts * c.moe_intermediate_size), dense);
    }
    w.layers.push_back(std::move(L));
  }
  return w;
}

DecodeLayerBytes decode_layer_bytes(const io::ModelConfig& c, int64_t batch, int64_t context,
                                    double kv_bytes_per_element, SyntheticFormat format, TensorParallel tp,
                                    KvShard kv) {
  check_tensor_parallel(c, tp.size);
  auto part = [&](int64_t n) {
    const auto [b, e] = tp.range(n);
    return static_cast<double>(e - b);
  };
  const double H = static_cast<double>(c.hidden_size), N = part(c.num_attention_heads), bf16 = 2;
  const double fp8 = 1.0 + 4.0 / (128.0 * 128.0), nvfp4 = 0.5 + 1.0 / 16.0;
  const double dense = format == SyntheticFormat::kFp8 ? fp8 : bf16;
  const double routed = format == SyntheticFormat::kFp8 ? fp8 : format == SyntheticFormat::kNvfp4 ? nvfp4 : bf16;
  DecodeLayerBytes b;
  const double q =
      c.q_lora_rank > 0 ? c.q_lora_rank * H + N * c.qk_head_dim() * c.q_lora_rank : N * c.qk_head_dim() * H;
  b.attention_weights = dense * (q + c.kv_cache_entry_dim() * H + H * N * c.v_head_dim) +
                        bf16 * N * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
  b.router = bf16 * c.n_routed_experts * H;
  const double expert_weights = 3.0 * H * static_cast<double>(c.moe_intermediate_size);
  const double expert = routed * expert_weights;
  b.shared_expert = dense * 3.0 * H * part(c.n_shared_experts * c.moe_intermediate_size);
  const double E = static_cast<double>(c.n_routed_experts), k = static_cast<double>(c.num_experts_per_tok);
  int64_t held = 0;
  for (int64_t e = 0; e < c.n_routed_experts; ++e) held += tp.holds_expert(e) ? 1 : 0;
  // Each expert is touched with probability 1 - (1 - k/E)^batch; this rank reads the ones it holds.
  b.expected_experts = static_cast<double>(held) * (1.0 - std::pow(1.0 - k / E, static_cast<double>(batch)));
  b.routed_experts = expert * b.expected_experts;
  b.kv = kv_bytes_per_element * static_cast<double>(c.kv_cache_entry_dim()) * static_cast<double>(batch) *
         static_cast<double>(shard_positions_held(context + 1, kKvPageSize, kv));
  return b;
}

}  // namespace tessera::model
