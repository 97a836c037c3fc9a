#include "io/model_config.h"

#include <cmath>

#include "core/error.h"
#include "io/json_file.h"

namespace tessera::io {

using core::fail;
using nlohmann::json;

namespace {

double get_mscale(double scale, double m = 1.0) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

RopeConfig parse_rope(const JsonFields& f) {
  RopeConfig r;
  // transformers 5.x writes rope_parameters (including rope_theta); 4.x writes rope_scaling.
  const json* scaling = nullptr;
  std::string key;
  for (const char* k : {"rope_parameters", "rope_scaling"}) {
    if (f.has(k)) {
      scaling = &f.raw(k);
      key = k;
      break;
    }
  }
  r.theta = f.get_double("rope_theta", 10000.0);
  if (!(r.theta > 1)) fail("{}: 'rope_theta' must be greater than 1, got {}", f.where(), r.theta);
  if (!scaling) return r;
  if (!scaling->is_object()) fail("{}: field '{}' must be an object", f.where(), key);
  JsonFields s(*scaling, f.where() + ":" + key);
  if (s.has("rope_theta")) {
    r.theta = s.get_double("rope_theta");
    if (!(r.theta > 1)) fail("{}: 'rope_theta' must be greater than 1, got {}", s.where(), r.theta);
  }
  std::string type = s.get_string("rope_type", s.get_string("type", "default"));
  if (type == "default") return r;
  if (type != "yarn")
    fail("{}: rope type '{}' is not supported (DeepSeek-V3-family models use 'yarn' or none)", s.where(), type);
  r.type = RopeConfig::Type::kYarn;
  r.factor = s.get_double("factor");
  if (r.factor <= 0) fail("{}: 'factor' must be positive, got {}", s.where(), r.factor);
  r.original_max_position_embeddings = s.get_int("original_max_position_embeddings");
  if (r.original_max_position_embeddings <= 0)
    fail("{}: 'original_max_position_embeddings' must be positive", s.where());
  r.beta_fast = s.get_double("beta_fast", 32.0);
  r.beta_slow = s.get_double("beta_slow", 1.0);
  if (!(r.beta_fast > 0) || !(r.beta_slow > 0))
    fail("{}: 'beta_fast' ({}) and 'beta_slow' ({}) must be positive", s.where(), r.beta_fast, r.beta_slow);
  r.mscale = s.get_double("mscale", 0.0);
  r.mscale_all_dim = s.get_double("mscale_all_dim", 0.0);
  if (s.has("attention_factor")) {
    r.attention_factor = s.get_double("attention_factor");
    if (!(*r.attention_factor > 0))
      fail("{}: 'attention_factor' must be positive, got {}", s.where(), *r.attention_factor);
  }
  r.truncate = s.get_bool("truncate", true);
  return r;
}

std::vector<int64_t> parse_ids(const json& v, const std::string& where, const std::string& key) {
  std::vector<int64_t> ids;
  if (v.is_null()) return ids;
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) fail("{}: '{}' must hold integers, got {}", where, key, v.dump());
      ids.push_back(e.get<int64_t>());
    }
    return ids;
  }
  fail("{}: '{}' must be an integer or a list of integers, got {}", where, key, v.dump());
}

}  // namespace

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.type == RopeConfig::Type::kYarn && rope.mscale_all_dim != 0.0) {
    double m = get_mscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

double ModelConfig::rope_attention_factor() const {
  if (rope.type != RopeConfig::Type::kYarn) return 1.0;
  if (rope.attention_factor) return *rope.attention_factor;
  if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0)
    return get_mscale(rope.factor, rope.mscale) / get_mscale(rope.factor, rope.mscale_all_dim);
  return get_mscale(rope.factor);
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int64_t d = qk_rope_head_dim;
  const float base = static_cast<float>(rope.theta);
  std::vector<float> pos_freqs(static_cast<size_t>(d / 2)), inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(d));
  if (rope.type != RopeConfig::Type::kYarn) {
    for (int64_t i = 0; i < d / 2; ++i) inv[i] = 1.0f / pos_freqs[i];
    return inv;
  }
  // YaRN: blend interpolated (1/(f*pos)) and extrapolated (1/pos) frequencies over a linear ramp.
  auto corr_dim = [&](double r) {
    return static_cast<double>(d) *
           std::log(static_cast<double>(rope.original_max_position_embeddings) / (r * 2.0 * M_PI)) /
           (2.0 * std::log(rope.theta));
  };
  double low = corr_dim(rope.beta_fast), high = corr_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;
  const float f = static_cast<float>(rope.factor);
  for (int64_t i = 0; i < d / 2; ++i) {
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    float extrapolation_factor = 1.0f - ramp;
    float interp = 1.0f / (f * pos_freqs[i]);
    float extrap = 1.0f / pos_freqs[i];
    inv[i] = interp * (1.0f - extrapolation_factor) + extrap * extrapolation_factor;
  }
  return inv;
}

uint64_t ModelConfig::parameter_count() const {
  const uint64_t H = hidden_size, N = num_attention_heads, dq = qk_head_dim(), Lq = q_lora_rank, Lkv = kv_lora_rank,
                 dr = qk_rope_head_dim, dn = qk_nope_head_dim, dv = v_head_dim, E = n_routed_experts,
                 Ie = moe_intermediate_size;
  uint64_t attn =
      (Lq > 0 ? H * Lq + Lq + Lq * N * dq : H * N * dq) + H * (Lkv + dr) + Lkv + Lkv * N * (dn + dv) + N * dv * H;
  uint64_t n = static_cast<uint64_t>(vocab_size) * H * (tie_word_embeddings ? 1 : 2) + H;
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    n += 2 * H + attn;
    n += is_moe_layer(l) ? E * H + E + E * 3 * H * Ie + static_cast<uint64_t>(n_shared_experts) * 3 * H * Ie
                         : 3 * H * static_cast<uint64_t>(intermediate_size);
  }
  return n;
}

uint64_t ModelConfig::vector_parameter_count() const {
  uint64_t n = static_cast<uint64_t>(hidden_size);  // the final norm
  for (int64_t l = 0; l < num_hidden_layers; ++l)
    n += 2 * static_cast<uint64_t>(hidden_size) + static_cast<uint64_t>(q_lora_rank) + kv_lora_rank +
         (is_moe_layer(l) ? static_cast<uint64_t>(n_routed_experts) : 0);
  return n;
}

ModelConfig parse_model_config(const json& root, const std::string& where) {
  if (!root.is_object()) fail("{}: must be a JSON object", where);
  ModelConfig c;
  JsonFields top(root, where);
  if (!top.has("architectures") || !root["architectures"].is_array() || root["architectures"].empty() ||
      !root["architectures"][0].is_string())
    fail(
        "{}: missing 'architectures' (expected [\"DeepseekV3ForCausalLM\"] or "
        "[\"KimiK25ForConditionalGeneration\"])",
        where);
  c.architecture = root["architectures"][0].get<std::string>();

  const json* lm = &root;
  std::string lm_where = where;
  if (c.architecture == "KimiK25ForConditionalGeneration") {
    if (!top.has("text_config") || !root["text_config"].is_object())
      fail("{}: KimiK25ForConditionalGeneration needs a 'text_config' object", where);
    lm = &root["text_config"];
    lm_where = where + ":text_config";
    c.weight_prefix = "language_model.";
    c.skipped_prefixes = {"vision_tower.", "mm_projector.", "multi_modal_projector."};
  } else if (c.architecture != "DeepseekV3ForCausalLM") {
    fail(
        "{}: architecture '{}' is not supported (supported: DeepseekV3ForCausalLM, "
        "KimiK25ForConditionalGeneration)",
        where, c.architecture);
  }
  JsonFields f(*lm, lm_where);
  c.model_type = f.get_string("model_type", "deepseek_v3");
  if (c.model_type != "deepseek_v3" && c.model_type != "kimi_k2")
    fail("{}: model_type '{}' is not supported (deepseek_v3 or kimi_k2)", lm_where, c.model_type);

  std::string act = f.get_string("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (only silu)", lm_where, act);
  if (f.get_int("moe_layer_freq", 1) != 1)
    fail("{}: moe_layer_freq {} is not supported (only 1: every layer from first_k_dense_replace on is MoE)", lm_where,
         f.get_int("moe_layer_freq"));
  if (f.get_bool("attention_bias", false)) fail("{}: attention_bias true is not supported", lm_where);
  std::string scoring = f.get_string("scoring_func", "sigmoid");
  if (scoring != "sigmoid")
    fail("{}: scoring_func '{}' is not supported (only sigmoid, as DeepSeek-V3 and Kimi-K2)", lm_where, scoring);
  std::string topk_method = f.get_string("topk_method", "noaux_tc");
  if (topk_method != "noaux_tc") fail("{}: topk_method '{}' is not supported (only noaux_tc)", lm_where, topk_method);
  if (!f.get_bool("rope_interleave", true))
    fail("{}: rope_interleave false is not supported (DeepSeek weights use interleaved rope pairs)", lm_where);

  c.vocab_size = f.get_int("vocab_size");
  c.hidden_size = f.get_int("hidden_size");
  c.intermediate_size = f.get_int("intermediate_size");
  c.moe_intermediate_size = f.get_int("moe_intermediate_size");
  c.num_hidden_layers = f.get_int("num_hidden_layers");
  c.num_attention_heads = f.get_int("num_attention_heads");
  int64_t kv_heads = f.get_int("num_key_value_heads", c.num_attention_heads);
  if (kv_heads != c.num_attention_heads)
    fail("{}: num_key_value_heads {} != num_attention_heads {}: MLA has no grouped-query attention", lm_where, kv_heads,
         c.num_attention_heads);
  c.q_lora_rank = f.get_optional_int("q_lora_rank").value_or(0);
  c.kv_lora_rank = f.get_int("kv_lora_rank");
  c.qk_nope_head_dim = f.get_int("qk_nope_head_dim");
  c.qk_rope_head_dim = f.get_int("qk_rope_head_dim");
  c.v_head_dim = f.get_int("v_head_dim");
  if (!f.has("n_routed_experts"))
    fail("{}: n_routed_experts is missing or null: dense-only models are not supported", lm_where);
  c.n_routed_experts = f.get_int("n_routed_experts");
  c.n_shared_experts = f.get_int("n_shared_experts", 0);
  c.num_experts_per_tok = f.get_int("num_experts_per_tok");
  c.n_group = f.get_int("n_group", 1);
  c.topk_group = f.get_int("topk_group", 1);
  c.first_k_dense_replace = f.get_int("first_k_dense_replace", 0);
  c.norm_topk_prob = f.get_bool("norm_topk_prob", true);
  c.routed_scaling_factor = f.get_double("routed_scaling_factor", 1.0);
  c.rms_norm_eps = f.get_double("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.get_int("max_position_embeddings");
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", top.get_bool("tie_word_embeddings", false));
  c.num_nextn_predict_layers = f.get_int("num_nextn_predict_layers", 0);
  c.rope = parse_rope(f);

  const json& ids_src = f.has("eos_token_id") ? *lm : root;
  if (JsonFields(ids_src, lm_where).has("bos_token_id"))
    c.bos_token_id = JsonFields(ids_src, lm_where).get_int("bos_token_id");
  if (ids_src.contains("eos_token_id")) c.eos_token_ids = parse_ids(ids_src["eos_token_id"], lm_where, "eos_token_id");

  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail("{}: '{}' must be positive, got {}", lm_where, name, v);
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("kv_lora_rank", c.kv_lora_rank);
  positive("qk_nope_head_dim", c.qk_nope_head_dim);
  positive("qk_rope_head_dim", c.qk_rope_head_dim);
  positive("v_head_dim", c.v_head_dim);
  positive("n_routed_experts", c.n_routed_experts);
  positive("num_experts_per_tok", c.num_experts_per_tok);
  positive("n_group", c.n_group);
  positive("max_position_embeddings", c.max_position_embeddings);
  if (c.q_lora_rank < 0) fail("{}: q_lora_rank must be positive or null", lm_where);
  if (c.qk_rope_head_dim % 2) fail("{}: qk_rope_head_dim {} must be even", lm_where, c.qk_rope_head_dim);
  if (c.n_routed_experts % c.n_group)
    fail("{}: n_routed_experts {} is not divisible by n_group {}", lm_where, c.n_routed_experts, c.n_group);
  if (c.topk_group < 1 || c.topk_group > c.n_group)
    fail("{}: topk_group {} must be between 1 and n_group {}", lm_where, c.topk_group, c.n_group);
  if (c.num_experts_per_tok > c.n_routed_experts / c.n_group * c.topk_group)
    fail("{}: num_experts_per_tok {} exceeds the experts in the {} selected groups", lm_where, c.num_experts_per_tok,
         c.topk_group);
  if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2)
    fail("{}: group-limited routing needs at least 2 experts per group", lm_where);
  if (c.first_k_dense_replace < c.num_hidden_layers) positive("moe_intermediate_size", c.moe_intermediate_size);
  if (c.first_k_dense_replace > 0) positive("intermediate_size", c.intermediate_size);

  // Ranges no real checkpoint comes near but a hostile or corrupt config.json can hold: each is
  // refused naming the field, before any size is computed from it.
  auto at_most = [&](const char* name, int64_t v, int64_t max) {
    if (v > max) fail("{}: '{}' is {}, beyond any model this server runs (at most {})", lm_where, name, v, max);
  };
  constexpr int64_t kMaxDim = int64_t{1} << 24, kMaxCount = int64_t{1} << 16;
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                                {"hidden_size", c.hidden_size},
                                {"intermediate_size", c.intermediate_size},
                                {"moe_intermediate_size", c.moe_intermediate_size},
                                {"q_lora_rank", c.q_lora_rank},
                                {"kv_lora_rank", c.kv_lora_rank},
                                {"qk_nope_head_dim", c.qk_nope_head_dim},
                                {"qk_rope_head_dim", c.qk_rope_head_dim},
                                {"v_head_dim", c.v_head_dim}})
    at_most(name, v, kMaxDim);
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"num_hidden_layers", c.num_hidden_layers},
                                {"num_attention_heads", c.num_attention_heads},
                                {"n_routed_experts", c.n_routed_experts},
                                {"n_shared_experts", c.n_shared_experts},
                                {"num_nextn_predict_layers", c.num_nextn_predict_layers}})
    at_most(name, v, kMaxCount);
  at_most("max_position_embeddings", c.max_position_embeddings, int64_t{1} << 30);
  if (c.intermediate_size < 0)
    fail("{}: 'intermediate_size' must not be negative, got {}", lm_where, c.intermediate_size);
  if (c.moe_intermediate_size < 0)
    fail("{}: 'moe_intermediate_size' must not be negative, got {}", lm_where, c.moe_intermediate_size);
  if (c.n_shared_experts < 0) fail("{}: 'n_shared_experts' must not be negative, got {}", lm_where, c.n_shared_experts);
  if (c.num_nextn_predict_layers < 0)
    fail("{}: 'num_nextn_predict_layers' must not be negative, got {}", lm_where, c.num_nextn_predict_layers);
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers)
    fail("{}: 'first_k_dense_replace' {} must be between 0 and num_hidden_layers {}", lm_where, c.first_k_dense_replace,
         c.num_hidden_layers);
  if (!(c.rms_norm_eps > 0) || c.rms_norm_eps >= 1)
    fail("{}: 'rms_norm_eps' must be a positive number below 1, got {}", lm_where, c.rms_norm_eps);
  if (!(c.routed_scaling_factor > 0))
    fail("{}: 'routed_scaling_factor' must be positive, got {}", lm_where, c.routed_scaling_factor);
  // Token ids the tokenizer and the sampler will use must be rows of the embedding.
  if (c.bos_token_id && (*c.bos_token_id < 0 || *c.bos_token_id >= c.vocab_size))
    fail("{}: 'bos_token_id' {} is outside the vocabulary [0, {})", lm_where, *c.bos_token_id, c.vocab_size);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      fail("{}: 'eos_token_id' {} is outside the vocabulary [0, {})", lm_where, id, c.vocab_size);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  return parse_model_config(read_json_file(path), path.string());
}

}  // namespace tessera::io
