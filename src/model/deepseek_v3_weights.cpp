#include "model/deepseek_v3_weights.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "model/kv_cache.h"

namespace tessera::model {

using core::DType;
using core::fail;
using ops::LinearWeight;

namespace {

const std::vector<DType> kFloatTypes = {DType::kBF16, DType::kF16, DType::kF32};

// A scale read while the plan is made (NVFP4 global and input scales, KV scales): refused here when it
// is NaN or infinite, as the weights are when they load.
float read_scalar_f32(const io::Checkpoint& ckpt, const std::string& name) {
  core::Tensor t = ckpt.get(name, DType::kF32, {});
  const float v = t.data<float>()[0];
  if (!std::isfinite(v))
    fail(
        "{}: tensor '{}': element 0 is {}: a scale must be a finite number (the file is corrupt, or was converted "
        "wrongly)",
        ckpt.file_of(name).string(), name, v);
  return v;
}

std::string quant_reason(const io::QuantConfig& q) { return q.source.empty() ? "the checkpoint" : q.source; }

}  // namespace

LinearWeight load_linear(const io::Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in,
                         const io::QuantConfig& quant) {
  LinearWeight w;
  w.name = module;
  w.out = out;
  w.in = in;
  const std::string wname = module + ".weight";
  const io::TensorInfo& info = ckpt.info(wname);
  const std::string file = ckpt.file_of(wname).string();
  const bool nvfp4_expected = quant.expects_nvfp4(module);

  if (info.dtype == DType::kU8) {
    if (quant.method != io::QuantConfig::Method::kNvfp4)
      fail("{}: tensor '{}' is U8 (packed NVFP4?) but the checkpoint has no NVFP4 quantization config", file, wname);
    w.format = LinearWeight::Format::kNvfp4;
    w.group_size = quant.group_size;
    if (in % w.group_size != 0)
      fail("{}: tensor '{}': input width {} is not a multiple of the NVFP4 group size {}", file, wname, in,
           w.group_size);
    w.weight = ckpt.get(wname, DType::kU8, {out, in / 2});
    const std::string scale = module + ".weight_scale", scale2 = module + ".weight_scale_2",
                      input = module + ".input_scale";
    for (const auto& n : {scale, scale2})
      if (!ckpt.has(n))
        fail("{}: module '{}' is NVFP4 (per {}) but its scale tensor '{}' is missing", file, module,
             quant_reason(quant), n);
    w.scale = ckpt.get(scale, DType::kF8E4M3, {out, in / w.group_size});
    w.global_scale = read_scalar_f32(ckpt, scale2);
    if (ckpt.has(input)) {
      w.input_scale = read_scalar_f32(ckpt, input);
    } else if (quant.quantized_activations) {
      fail("{}: module '{}' is NVFP4 with quantized activations (per {}) but '{}' is missing", file, module,
           quant_reason(quant), input);
    }
    return w;
  }
  if (nvfp4_expected)
    fail(
        "{}: module '{}' is listed as NVFP4-quantized by {} (not in its exclude list) but its weight is {}, "
        "not packed U8",
        file, module, quant_reason(quant), core::dtype_name(info.dtype));
  if (info.dtype == DType::kF8E4M3) {
    if (quant.method != io::QuantConfig::Method::kFp8Block)
      fail("{}: tensor '{}' is F8_E4M3 but config.json has no FP8 block quantization_config", file, wname);
    w.format = LinearWeight::Format::kFp8Block;
    w.block_rows = quant.block_rows;
    w.block_cols = quant.block_cols;
    w.weight = ckpt.get(wname, DType::kF8E4M3, {out, in});
    const std::string scale = module + ".weight_scale_inv";
    if (!ckpt.has(scale))
      fail("{}: module '{}' is FP8 (per {}) but its scale tensor '{}' is missing", file, module, quant_reason(quant),
           scale);
    w.scale =
        ckpt.get(scale, DType::kF32, {(out + w.block_rows - 1) / w.block_rows, (in + w.block_cols - 1) / w.block_cols});
    return w;
  }
  w.format = LinearWeight::Format::kDense;
  w.weight = ckpt.get_any(wname, kFloatTypes, {out, in});
  return w;
}

namespace {

core::Tensor load_norm(const io::Checkpoint& ckpt, const std::string& name, int64_t dim) {
  return ckpt.get_any(name, kFloatTypes, {dim});
}

ops::ExpertWeights load_mlp(const io::Checkpoint& ckpt, const std::string& prefix, int64_t hidden, int64_t inter,
                            const io::QuantConfig& quant) {
  return {load_linear(ckpt, prefix + ".gate_proj", inter, hidden, quant),
          load_linear(ckpt, prefix + ".up_proj", inter, hidden, quant),
          load_linear(ckpt, prefix + ".down_proj", hidden, inter, quant)};
}

// transformers-5 fused expert layout: experts.gate_up_proj [E, 2I, H] (gate rows first) and
// experts.down_proj [E, H, I], as dense tensors.
std::vector<ops::ExpertWeights> load_fused_experts(const io::Checkpoint& ckpt, const std::string& prefix,
                                                   int64_t experts, int64_t hidden, int64_t inter) {
  core::Tensor gate_up = ckpt.get_any(prefix + ".gate_up_proj", kFloatTypes, {experts, 2 * inter, hidden});
  core::Tensor down = ckpt.get_any(prefix + ".down_proj", kFloatTypes, {experts, hidden, inter});
  std::vector<ops::ExpertWeights> out;
  auto view = [](const core::Tensor& t, int64_t row_begin, int64_t rows, int64_t cols, std::string name) {
    LinearWeight w;
    w.name = std::move(name);
    w.out = rows;
    w.in = cols;
    w.weight = t.reshape({t.numel() / cols, cols}).slice_rows(row_begin, row_begin + rows);
    return w;
  };
  for (int64_t e = 0; e < experts; ++e) {
    std::string n = prefix + "." + std::to_string(e);
    out.push_back({view(gate_up, e * 2 * inter, inter, hidden, n + ".gate_proj"),
                   view(gate_up, e * 2 * inter + inter, inter, hidden, n + ".up_proj"),
                   view(down, e * hidden, hidden, inter, n + ".down_proj")});
  }
  return out;
}

std::optional<float> find_kv_scale(const io::Checkpoint& ckpt, const std::string& attn, char which) {
  // ModelOpt writes self_attn.k_proj.k_scale (MLA has no k_proj: the name is synthetic); vLLM-style
  // exports use self_attn.attn.k_scale; older ones self_attn.k_scale or a single kv_scale.
  const std::string s(1, which);
  for (const auto& n : {attn + "." + s + "_proj." + s + "_scale", attn + ".attn." + s + "_scale",
                        attn + ".mla_attn." + s + "_scale", attn + "." + s + "_scale", attn + ".kv_scale"})
    if (ckpt.has(n)) return read_scalar_f32(ckpt, n);
  return std::nullopt;
}

}  // namespace

ModelWeights load_deepseek_v3_weights(const io::Checkpoint& ckpt, const io::ModelConfig& c,
                                      const io::QuantConfig& quant) {
  ModelWeights w;
  const std::string p = c.weight_prefix;
  const int64_t H = c.hidden_size, N = c.num_attention_heads;
  w.embed = ckpt.get_any(p + "model.embed_tokens.weight", kFloatTypes, {c.vocab_size, H});
  w.final_norm = load_norm(ckpt, p + "model.norm.weight", H);
  if (c.tie_word_embeddings && !ckpt.has(p + "lm_head.weight")) {
    w.lm_head.name = p + "model.embed_tokens";
    w.lm_head.out = c.vocab_size;
    w.lm_head.in = H;
    w.lm_head.weight = w.embed;
  } else {
    w.lm_head = load_linear(ckpt, p + "lm_head", c.vocab_size, H, quant);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights L;
    const std::string lp = p + "model.layers." + std::to_string(l);
    const std::string ap = lp + ".self_attn";
    L.input_norm = load_norm(ckpt, lp + ".input_layernorm.weight", H);
    L.post_attention_norm = load_norm(ckpt, lp + ".post_attention_layernorm.weight", H);
    auto& A = L.attn;
    if (c.q_lora_rank > 0) {
      A.q_a = load_linear(ckpt, ap + ".q_a_proj", c.q_lora_rank, H, quant);
      A.q_a_norm = load_norm(ckpt, ap + ".q_a_layernorm.weight", c.q_lora_rank);
      A.q_b = load_linear(ckpt, ap + ".q_b_proj", N * c.qk_head_dim(), c.q_lora_rank, quant);
    } else {
      A.q = load_linear(ckpt, ap + ".q_proj", N * c.qk_head_dim(), H, quant);
    }
    A.kv_a = load_linear(ckpt, ap + ".kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, H, quant);
    A.kv_a_norm = load_norm(ckpt, ap + ".kv_a_layernorm.weight", c.kv_lora_rank);
    A.kv_b = load_linear(ckpt, ap + ".kv_b_proj", N * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, quant);
    A.o = load_linear(ckpt, ap + ".o_proj", H, N * c.v_head_dim, quant);
    A.k_scale = find_kv_scale(ckpt, ap, 'k');
    A.v_scale = find_kv_scale(ckpt, ap, 'v');

    L.is_moe = c.is_moe_layer(l);
    const std::string mp = lp + ".mlp";
    if (!L.is_moe) {
      L.dense_mlp = load_mlp(ckpt, mp, H, c.intermediate_size, quant);
    } else {
      auto& M = L.moe;
      M.router = load_linear(ckpt, mp + ".gate", c.n_routed_experts, H, quant);
      M.correction_bias = ckpt.get_any(mp + ".gate.e_score_correction_bias", kFloatTypes, {c.n_routed_experts});
      if (ckpt.has(mp + ".experts.gate_up_proj")) {
        M.experts = load_fused_experts(ckpt, mp + ".experts", c.n_routed_experts, H, c.moe_intermediate_size);
      } else {
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
          M.experts.push_back(load_mlp(ckpt, mp + ".experts." + std::to_string(e), H, c.moe_intermediate_size, quant));
      }
      if (c.n_shared_experts > 0)
        M.shared = load_mlp(ckpt, mp + ".shared_experts", H, c.n_shared_experts * c.moe_intermediate_size, quant);
    }
    w.layers.push_back(std::move(L));
  }

  // Everything else: other towers (vision, projector) and MTP layers are skipped, with one log line.
  std::map<std::string, int> skipped_groups;
  const std::string layer_prefix = p + "model.layers.";
  for (const auto& name : ckpt.names()) {
    bool other_tower = false;
    for (const auto& sp : c.skipped_prefixes) other_tower |= name.rfind(sp, 0) == 0;
    if (other_tower) {
      skipped_groups[name.substr(0, name.find('.'))]++;
      w.skipped.push_back(name);
    } else if (name.rfind(layer_prefix, 0) == 0) {
      int64_t layer = std::strtoll(name.c_str() + layer_prefix.size(), nullptr, 10);
      if (layer >= c.num_hidden_layers) {
        skipped_groups["MTP layer " + std::to_string(layer)]++;
        w.skipped.push_back(name);
      }
    }
  }
  for (const auto& [group, n] : skipped_groups)
    spdlog::info("skipping {} tensors of '{}' (not part of the language model)", n, group);
  return w;
}

std::vector<ops::WeightGroup> linear_groups(const ModelWeights& w) {
  std::vector<ops::WeightGroup> groups;
  auto add = [&](const char* name, ops::LinearUse use, const ops::LinearWeight& l) {
    const std::string format = l.format_name();
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const ops::WeightGroup& g) { return g.name == name && g.format_name == format; });
    if (it == groups.end()) {
      groups.push_back({name, use, l.format, format, 0, 0, 0, l.in});
      it = groups.end() - 1;
    }
    it->min_in = std::min(it->min_in, l.in);
    it->linears += 1;
    it->params += static_cast<uint64_t>(l.out * l.in);
    it->stored_bytes += l.stored_bytes();
  };
  using ops::LinearUse;
  auto mlp = [&](const char* name, const ops::ExpertWeights& m) {
    for (const auto* l : {&m.gate, &m.up, &m.down}) add(name, LinearUse::kProjection, *l);
  };
  for (const auto& L : w.layers) {
    const auto& A = L.attn;
    for (const auto* l : {A.q_a ? &*A.q_a : nullptr, A.q_b ? &*A.q_b : nullptr, A.q ? &*A.q : nullptr, &A.kv_a, &A.o})
      if (l) add("attention", LinearUse::kProjection, *l);
    add("attention kv_b", LinearUse::kAttentionKvB, A.kv_b);
  }
  for (const auto& L : w.layers)
    if (!L.is_moe) mlp("dense MLP", L.dense_mlp);
  for (const auto& L : w.layers)
    if (L.is_moe) add("router", LinearUse::kRouter, L.moe.router);
  for (const auto& L : w.layers)
    if (L.is_moe)
      for (const auto& e : L.moe.experts)
        if (e.held()) mlp(ops::kRoutedExpertsGroup, e);  // not another tensor-parallel rank's
  for (const auto& L : w.layers)
    if (L.is_moe && L.moe.shared) mlp(ops::kSharedExpertsGroup, *L.moe.shared);
  if (w.lm_head.weight.raw() != w.embed.raw()) add("lm_head", LinearUse::kProjection, w.lm_head);
  return groups;
}

std::vector<float> kv_cache_scales(const ModelWeights& w, core::KvCacheDtype dtype) {
  if (dtype != core::KvCacheDtype::kFp8E4M3) return {};
  std::vector<std::optional<float>> k, v;
  for (const auto& L : w.layers) {
    k.push_back(L.attn.k_scale);
    v.push_back(L.attn.v_scale);
  }
  return fp8_kv_layer_scales(k, v);
}

}  // namespace tessera::model
