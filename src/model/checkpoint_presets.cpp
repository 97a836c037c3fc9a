#include "model/checkpoint_presets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tessera::model {
namespace {

using core::DType;
using core::fail;
using OJson = nlohmann::ordered_json;

constexpr const char* kNames[] = {"kimi-k2.5-nvfp4", "deepseek-v3-fp8", "deepseek-v3-bf16"};

// Standard deviation of an e2m1 code drawn uniformly from all 16 codes: sqrt(mean of the squared
// magnitudes {0, .25, 1, 2.25, 4, 9, 16, 36}) = sqrt(8.5625).
constexpr double kE2m1CodeStd = 2.9261749776799064;
// Standard deviation of e4m3(uniform(-448, 448)), the DeepSeek FP8 weight bytes (rounding to e4m3
// changes the uniform's 448/sqrt(3) by far less than the scale jitter).
constexpr double kFp8WeightStd = 258.6529;
// Block scales vary by +-25% around their mean, as real calibrated scales vary from block to block.
constexpr double kScaleJitter = 0.25;
// NVFP4 block scales are centred near 128, well inside e4m3's range (max 448), and the per-tensor
// weight_scale_2 is the power of two that puts them there.
constexpr double kNvfp4BlockScaleCentre = 128.0;
// ModelOpt's activation global scale is amax_x / (6 * 448); 1/512 stands for amax ~ 5.
constexpr double kNvfp4InputScale = 1.0 / 512.0;
// The vision tower and projector are only there to be skipped: a small stand-in of the real
// MoonViT (whose 400M parameters nothing in tessera reads).
constexpr int64_t kVisionHidden = 64;
constexpr int64_t kVisionMerge = 2;

Fill uniform_std(double mean, double std) { return {Fill::Kind::kUniform, mean, std * std::sqrt(3.0)}; }
Fill constant(double v) { return {Fill::Kind::kConstant, v, 0.0}; }
Fill random_bytes() { return {Fill::Kind::kRandomBytes, 0.0, 0.0}; }

enum class LinearFormat { kBf16, kFp8Block, kNvfp4 };

class LayoutBuilder {
 public:
  std::vector<TensorPlan> tensors;

  void add(std::string name, DType dtype, core::Shape shape, Fill fill) {
    tensors.push_back({{std::move(name), dtype, std::move(shape)}, fill});
  }
  void norm(const std::string& name, int64_t dim) { add(name, DType::kBF16, {dim}, uniform_std(1.0, 0.05)); }

  // One linear `module` with weight [out, in] in `format` (shared/reference/formats.md §2a, §4).
  void linear(const std::string& module, int64_t out, int64_t in, LinearFormat format) {
    const double std = linear_weight_std(in);
    switch (format) {
      case LinearFormat::kBf16:
        add(module + ".weight", DType::kBF16, {out, in}, uniform_std(0.0, std));
        return;
      case LinearFormat::kFp8Block: {
        add(module + ".weight", DType::kF8E4M3, {out, in}, {Fill::Kind::kUniform, 0.0, 448.0});
        const double s = std / kFp8WeightStd;
        add(module + ".weight_scale_inv", DType::kF32, {(out + 127) / 128, (in + 127) / 128},
            {Fill::Kind::kUniform, s, kScaleJitter * s});
        return;
      }
      case LinearFormat::kNvfp4: {
        // W = e2m1 * weight_scale * weight_scale_2: the product of the two scales must be std / code std.
        const double per_block = std / kE2m1CodeStd;
        const double global = std::exp2(std::round(std::log2(per_block / kNvfp4BlockScaleCentre)));
        const double block = per_block / global;
        add(module + ".weight", DType::kU8, {out, in / 2}, random_bytes());
        add(module + ".weight_scale", DType::kF8E4M3, {out, in / 16},
            {Fill::Kind::kUniform, block, kScaleJitter * block});
        add(module + ".weight_scale_2", DType::kF32, {}, constant(global));
        add(module + ".input_scale", DType::kF32, {}, constant(kNvfp4InputScale));
        return;
      }
    }
  }

  void mlp(const std::string& prefix, int64_t hidden, int64_t inter, LinearFormat format) {
    linear(prefix + ".gate_proj", inter, hidden, format);
    linear(prefix + ".up_proj", inter, hidden, format);
    linear(prefix + ".down_proj", hidden, inter, format);
  }
};

OJson rope_scaling(CheckpointKind kind) {
  if (kind == CheckpointKind::kKimiK25Nvfp4)
    return {{"type", "yarn"},       {"factor", 64.0},   {"original_max_position_embeddings", 4096},
            {"beta_fast", 1.0},     {"beta_slow", 1.0}, {"mscale", 1.0},
            {"mscale_all_dim", 1.0}};
  return {{"type", "yarn"},       {"factor", 40.0},   {"original_max_position_embeddings", 4096},
          {"beta_fast", 32.0},    {"beta_slow", 1.0}, {"mscale", 1.0},
          {"mscale_all_dim", 1.0}};
}

// The language-model fields, in the order of the real files (and the fixtures). BOS/EOS are the ids
// of the DeepSeek-V3 tokenizer the command ships with every checkpoint (0 and 1).
OJson lm_config(CheckpointKind kind, const CheckpointDims& d) {
  const bool kimi = kind == CheckpointKind::kKimiK25Nvfp4;
  return OJson{{"model_type", kimi ? "kimi_k2" : "deepseek_v3"},
               {"hidden_act", "silu"},
               {"attention_bias", false},
               {"tie_word_embeddings", false},
               {"norm_topk_prob", true},
               {"initializer_range", 0.02},
               {"bos_token_id", 0},
               {"eos_token_id", 1},
               {"topk_method", "noaux_tc"},
               {"scoring_func", "sigmoid"},
               {"moe_layer_freq", 1},
               {"vocab_size", d.vocab},
               {"hidden_size", d.hidden},
               {"intermediate_size", d.intermediate},
               {"moe_intermediate_size", d.moe_intermediate},
               {"num_hidden_layers", d.layers},
               {"num_attention_heads", d.heads},
               {"num_key_value_heads", d.heads},
               {"n_shared_experts", d.shared_experts},
               {"n_routed_experts", d.experts},
               {"routed_scaling_factor", kimi ? 2.827 : 2.5},
               {"kv_lora_rank", d.kv_lora_rank},
               {"q_lora_rank", d.q_lora_rank},
               {"qk_rope_head_dim", d.qk_rope_head_dim},
               {"qk_nope_head_dim", d.qk_nope_head_dim},
               {"v_head_dim", d.v_head_dim},
               {"n_group", d.n_group},
               {"topk_group", d.topk_group},
               {"num_experts_per_tok", d.top_k},
               {"first_k_dense_replace", d.first_k_dense},
               {"max_position_embeddings", kimi ? 262144 : 163840},
               {"rms_norm_eps", kimi ? 1e-5 : 1e-6},
               {"rope_theta", kimi ? 50000.0 : 10000.0},
               {"rope_scaling", rope_scaling(kind)},
               // No MTP layer is written (loaders skip it anyway), so none is announced.
               {"num_nextn_predict_layers", 0},
               {"torch_dtype", "bfloat16"},
               {"use_cache", true},
               {"transformers_version", kimi ? "4.46.3" : "4.33.1"},
               {"ep_size", 1},
               {"aux_loss_alpha", 0.001},
               {"seq_aux", true}};
}

// ModelOpt's exclude list for the Kimi-K2.5 "experts only" recipe (formats.md §1c): every module
// but the routed experts stays BF16.
std::vector<std::string> kimi_exclude_modules(const CheckpointDims& d) {
  std::vector<std::string> ex = {"language_model.lm_head", "language_model.model.embed_tokens*",
                                 "language_model.model.layers.*.self_attn*",
                                 "language_model.model.layers.*.mlp.shared_experts*"};
  for (int64_t l = 0; l < d.first_k_dense; ++l) ex.push_back(fmt::format("language_model.model.layers.{}.mlp*", l));
  for (const char* s : {"language_model.model.layers.*.mlp.gate", "vision_tower*", "mm_projector*"}) ex.push_back(s);
  return ex;
}

OJson kimi_config(const CheckpointDims& d) {
  const auto exclude = kimi_exclude_modules(d);
  const OJson fp4 = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  const OJson quant = {
      {"config_groups", {{"group_0", {{"input_activations", fp4}, {"weights", fp4}, {"targets", {"Linear"}}}}}},
      {"ignore", exclude},
      {"quant_algo", "NVFP4"},
      {"kv_cache_scheme", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
      {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
      {"quant_method", "modelopt"}};
  return OJson{{"architectures", {"KimiK25ForConditionalGeneration"}},
               {"model_type", "kimi_k25"},
               {"text_config", lm_config(CheckpointKind::kKimiK25Nvfp4, d)},
               {"vision_config",
                {{"model_type", "moonvit"},
                 {"patch_size", 14},
                 {"hidden_size", kVisionHidden},
                 {"num_hidden_layers", 1},
                 {"num_attention_heads", 4},
                 {"merge_kernel_size", {kVisionMerge, kVisionMerge}}}},
               // The real ids where the vocabulary has them, else ids near its end.
               {"media_placeholder_token_id", d.vocab > 163605 ? int64_t{163605} : d.vocab - 24},
               {"pad_token_id", d.vocab - 1},
               {"bos_token_id", 0},
               {"eos_token_id", 1},
               {"tie_word_embeddings", false},
               {"torch_dtype", "bfloat16"},
               {"quantization_config", quant}};
}

OJson kimi_hf_quant_config(const CheckpointDims& d) {
  return OJson{{"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
               {"quantization",
                {{"quant_algo", "NVFP4"},
                 {"kv_cache_quant_algo", "FP8"},
                 {"group_size", 16},
                 {"exclude_modules", kimi_exclude_modules(d)}}}};
}

OJson deepseek_config(CheckpointKind kind, const CheckpointDims& d) {
  OJson c = {{"architectures", {"DeepseekV3ForCausalLM"}}};
  const OJson lm = lm_config(kind, d);
  for (const auto& [k, v] : lm.items()) c[k] = v;
  if (kind == CheckpointKind::kDeepseekV3Fp8)
    c["quantization_config"] = {
        {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  return c;
}

void check_at_least(const char* flag, int64_t v, int64_t min) {
  if (v < min) fail("{} {}: must be at least {}", flag, v, min);
}
void check_multiple(const char* flag, int64_t v, int64_t m, const char* why) {
  if (v % m != 0) fail("{} {}: must be a multiple of {} ({})", flag, v, m, why);
}

}  // namespace

std::optional<CheckpointKind> parse_checkpoint_kind(const std::string& name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (name == kNames[i]) return static_cast<CheckpointKind>(i);
  return std::nullopt;
}

std::string checkpoint_kind_name(CheckpointKind kind) { return kNames[static_cast<size_t>(kind)]; }

std::vector<std::string> checkpoint_kind_names() { return {std::begin(kNames), std::end(kNames)}; }

double linear_weight_std(int64_t in) { return std::min(0.02, 1.0 / std::sqrt(static_cast<double>(in))); }

uint64_t CheckpointLayout::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.spec.nbytes();
  return n;
}

CheckpointDims real_dims(CheckpointKind kind) {
  CheckpointDims d;  // DeepSeek-V3 (shared/reference/formats.md §6)
  if (kind == CheckpointKind::kKimiK25Nvfp4) {
    d.vocab = 163840;
    d.heads = 64;
    d.n_group = 1;
    d.topk_group = 1;
    d.first_k_dense = 1;
  }
  return d;
}

void finalize_dims(CheckpointKind kind, CheckpointDims& d) {
  check_at_least("--layers", d.layers, 1);
  check_at_least("--experts", d.experts, 1);
  check_at_least("--hidden", d.hidden, 16);
  check_at_least("--vocab", d.vocab, 32);
  check_at_least("--moe-intermediate", d.moe_intermediate, 16);
  check_at_least("--intermediate", d.intermediate, 16);
  check_at_least("--heads", d.heads, 1);
  if (kind == CheckpointKind::kKimiK25Nvfp4) {
    // NVFP4 packs two codes per byte and scales blocks of 16 inputs (routed experts: hidden and
    // moe_intermediate are their input widths).
    check_multiple("--hidden", d.hidden, 16, "the NVFP4 block size");
    check_multiple("--moe-intermediate", d.moe_intermediate, 16, "the NVFP4 block size");
  }
  const CheckpointDims real = real_dims(kind);
  d.top_k = std::min<int64_t>(real.top_k, d.experts);
  d.n_group = std::min(real.n_group, d.experts);
  while (d.n_group > 1 && (d.experts % d.n_group != 0 || d.experts / d.n_group < 2)) --d.n_group;
  d.topk_group = std::min(real.topk_group, d.n_group);
  while (d.topk_group < d.n_group && d.top_k > d.experts / d.n_group * d.topk_group) ++d.topk_group;
  d.first_k_dense = d.layers > real.first_k_dense ? real.first_k_dense : std::min<int64_t>(1, d.layers - 1);
  if (d.first_dense_override >= 0) {
    if (d.first_dense_override > d.layers)
      core::fail("--first-dense {}: more dense layers than --layers {}", d.first_dense_override, d.layers);
    d.first_k_dense = d.first_dense_override;
  }
}

CheckpointLayout checkpoint_layout(CheckpointKind kind, const CheckpointDims& d) {
  const bool kimi = kind == CheckpointKind::kKimiK25Nvfp4;
  const LinearFormat dense_format =
      kind == CheckpointKind::kDeepseekV3Fp8 ? LinearFormat::kFp8Block : LinearFormat::kBf16;
  const LinearFormat expert_format = kimi ? LinearFormat::kNvfp4 : dense_format;
  const std::string p = kimi ? "language_model." : "";
  const int64_t H = d.hidden, N = d.heads;

  LayoutBuilder b;
  b.add(p + "model.embed_tokens.weight", DType::kBF16, {d.vocab, H}, uniform_std(0.0, kEmbeddingStd));
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string lp = fmt::format("{}model.layers.{}", p, l);
    const std::string ap = lp + ".self_attn", mp = lp + ".mlp";
    b.norm(lp + ".input_layernorm.weight", H);
    b.linear(ap + ".q_a_proj", d.q_lora_rank, H, dense_format);
    b.norm(ap + ".q_a_layernorm.weight", d.q_lora_rank);
    b.linear(ap + ".q_b_proj", N * (d.qk_nope_head_dim + d.qk_rope_head_dim), d.q_lora_rank, dense_format);
    b.linear(ap + ".kv_a_proj_with_mqa", d.kv_lora_rank + d.qk_rope_head_dim, H, dense_format);
    b.norm(ap + ".kv_a_layernorm.weight", d.kv_lora_rank);
    b.linear(ap + ".kv_b_proj", N * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank, dense_format);
    b.linear(ap + ".o_proj", H, N * d.v_head_dim, dense_format);
    if (kimi) {
      // ModelOpt's FP8 KV-cache scales under MLA's synthetic k_proj/v_proj names (formats.md §2c),
      // 1.0 as the kv_fp8_cast recipe writes them.
      b.add(ap + ".k_proj.k_scale", DType::kF32, {}, constant(1.0));
      b.add(ap + ".v_proj.v_scale", DType::kF32, {}, constant(1.0));
    }
    b.norm(lp + ".post_attention_layernorm.weight", H);
    if (l < d.first_k_dense) {
      b.mlp(mp, H, d.intermediate, dense_format);
      continue;
    }
    b.linear(mp + ".gate", d.experts, H, LinearFormat::kBf16);  // the router is never quantized
    b.add(mp + ".gate.e_score_correction_bias", DType::kF32, {d.experts}, uniform_std(0.0, 0.01));
    for (int64_t e = 0; e < d.experts; ++e)
      b.mlp(fmt::format("{}.experts.{}", mp, e), H, d.moe_intermediate, expert_format);
    b.mlp(mp + ".shared_experts", H, d.shared_experts * d.moe_intermediate, dense_format);
  }
  b.norm(p + "model.norm.weight", H);
  b.add(p + "lm_head.weight", DType::kBF16, {d.vocab, H}, uniform_std(0.0, linear_weight_std(H)));
  if (kimi) {
    const int64_t vh = kVisionHidden, merged = kVisionHidden * kVisionMerge * kVisionMerge;
    b.add("vision_tower.patch_embed.proj.weight", DType::kBF16, {vh, 3, 14, 14}, uniform_std(0.0, 0.02));
    b.add("vision_tower.encoder.blocks.0.attn.wqkv.weight", DType::kBF16, {3 * vh, vh}, uniform_std(0.0, 0.02));
    b.add("mm_projector.proj.0.weight", DType::kBF16, {merged, merged}, uniform_std(0.0, 0.02));
    b.add("mm_projector.proj.2.weight", DType::kBF16, {H, merged}, uniform_std(0.0, 0.02));
  }

  CheckpointLayout out{kind, d, kimi ? kimi_config(d) : deepseek_config(kind, d), std::nullopt, std::move(b.tensors)};
  if (kimi) out.hf_quant_config = kimi_hf_quant_config(d);
  return out;
}

}  // namespace tessera::model
