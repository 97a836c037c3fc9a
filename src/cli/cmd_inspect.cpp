// tessera inspect: the resolved configuration of a checkpoint, without running it.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_options.h"
#include "core/format.h"
#include "model/deepseek_v3.h"

namespace tessera::cli {
namespace {

struct InspectArgs {
  ModelOptions model;
  bool json = false;
};

using core::human_bytes;

int run(const InspectArgs& a) {
  model::LoadedModel m = model::load_model(a.model.model_dir, a.model.load_options());
  const auto& c = m.config;
  const auto& w = static_cast<const model::DeepseekV3Model&>(*m.model).weights();
  // Formats of the linears by role: role -> format -> count.
  std::map<std::string, std::map<std::string, int>> formats;
  auto note = [&](const std::string& role, const ops::LinearWeight& l) { formats[role][l.format_name()]++; };
  note("lm_head", w.lm_head);
  int k_scales = 0, v_scales = 0;
  for (const auto& L : w.layers) {
    const auto& A = L.attn;
    for (const auto* l :
         {A.q_a ? &*A.q_a : nullptr, A.q_b ? &*A.q_b : nullptr, A.q ? &*A.q : nullptr, &A.kv_a, &A.kv_b, &A.o})
      if (l) note("attention", *l);
    k_scales += A.k_scale.has_value();
    v_scales += A.v_scale.has_value();
    if (!L.is_moe) {
      for (const auto* l : {&L.dense_mlp.gate, &L.dense_mlp.up, &L.dense_mlp.down}) note("dense mlp", *l);
      continue;
    }
    note("router", L.moe.router);
    for (const auto& e : L.moe.experts)
      for (const auto* l : {&e.gate, &e.up, &e.down}) note("routed experts", *l);
    if (L.moe.shared)
      for (const auto* l : {&L.moe.shared->gate, &L.moe.shared->up, &L.moe.shared->down})
        note(ops::kSharedExpertsGroup, *l);
  }
  int dense_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) dense_layers += !c.is_moe_layer(l);
  nlohmann::ordered_json j;
  j["architecture"] = c.architecture;
  j["model_type"] = c.model_type;
  j["weight_prefix"] = c.weight_prefix;
  j["layers"] = {{"total", c.num_hidden_layers}, {"dense", dense_layers}, {"moe", c.num_hidden_layers - dense_layers}};
  j["attention"] = {{"heads", c.num_attention_heads},
                    {"q_lora_rank", c.q_lora_rank},
                    {"kv_lora_rank", c.kv_lora_rank},
                    {"qk_nope_head_dim", c.qk_nope_head_dim},
                    {"qk_rope_head_dim", c.qk_rope_head_dim},
                    {"v_head_dim", c.v_head_dim},
                    {"softmax_scale", c.softmax_scale()},
                    {"rope", c.rope.type == io::RopeConfig::Type::kYarn ? "yarn" : "default"},
                    {"rope_theta", c.rope.theta},
                    {"rope_attention_factor", c.rope_attention_factor()},
                    {"latent_norm_eps", c.latent_norm_eps},
                    {"latent_norm_eps_source", c.latent_norm_eps_source},
                    {"rms_norm_eps", c.rms_norm_eps}};
  j["moe"] = {{"routed_experts", c.n_routed_experts},
              {"experts_per_token", c.num_experts_per_tok},
              {"shared_experts", c.n_shared_experts},
              {"n_group", c.n_group},
              {"topk_group", c.topk_group},
              {"routed_scaling_factor", c.routed_scaling_factor},
              {"moe_intermediate_size", c.moe_intermediate_size}};
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["quantization"] = {{"method", m.quant.method_name()}, {"source", m.quant.source}, {"exclude", m.quant.exclude}};
  j["linear_formats"] = formats;
  j["kv_cache"] = {{"dtype", core::kv_cache_dtype_name(m.kv_cache.dtype)},
                   {"reason", m.kv_cache.reason},
                   {"bytes_per_token",
                    model::KvCache::bytes_per_token(c.num_hidden_layers, c.kv_cache_entry_dim(), m.kv_cache.dtype)},
                   {"layers_with_k_scale", k_scales},
                   {"layers_with_v_scale", v_scales}};
  j["parameters"] = m.model->parameter_count();
  j["weight_bytes"] = m.model->weight_bytes();
  j["skipped_tensors"] = w.skipped.size();
  j["checkpoint"] = {{"files", m.checkpoint->num_files()},
                     {"tensors", m.checkpoint->names().size()},
                     {"bytes", m.checkpoint->total_bytes()}};
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("architecture   {} (model_type {}){}\n", c.architecture, c.model_type,
             c.weight_prefix.empty() ? "" : fmt::format(", language model under '{}'", c.weight_prefix));
  fmt::print("layers         {} ({} dense MLP, {} MoE)\n", c.num_hidden_layers, dense_layers,
             c.num_hidden_layers - dense_layers);
  fmt::print("attention      MLA, {} heads, q_lora {}, kv_lora {}, nope {} + rope {}, v {}; softmax scale {:.10g}\n",
             c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
             c.softmax_scale());
  fmt::print("rope           {} theta {:g}, attention factor {:.10g}\n",
             c.rope.type == io::RopeConfig::Type::kYarn
                 ? fmt::format("yarn x{:g} (orig {})", c.rope.factor, c.rope.original_max_position_embeddings)
                 : "default",
             c.rope.theta, c.rope_attention_factor());
  fmt::print("norm eps       rms_norm_eps {:g}; latent norms {:g} ({})\n", c.rms_norm_eps, c.latent_norm_eps,
             c.latent_norm_eps_source);
  fmt::print("moe            {} routed (top {}, groups {}/{}), {} shared, scaling {:g}\n", c.n_routed_experts,
             c.num_experts_per_tok, c.topk_group, c.n_group, c.n_shared_experts, c.routed_scaling_factor);
  fmt::print("quantization   {}{}\n", m.quant.method_name(),
             m.quant.source.empty() ? "" : " (from " + m.quant.source + ")");
  for (const auto& [role, f] : formats) {
    std::string parts;
    for (const auto& [name, n] : f) parts += fmt::format("{}{} x{}", parts.empty() ? "" : ", ", name, n);
    fmt::print("  {:<15}{}\n", role, parts);
  }
  fmt::print("kv cache       {}: {}\n", core::kv_cache_dtype_name(m.kv_cache.dtype), m.kv_cache.reason);
  fmt::print("               {} bytes per token; k/v scales found in {}/{} layers\n",
             model::KvCache::bytes_per_token(c.num_hidden_layers, c.kv_cache_entry_dim(), m.kv_cache.dtype), k_scales,
             v_scales);
  fmt::print("parameters     {} ({:.3f} B), weights {}\n", m.model->parameter_count(), m.model->parameter_count() / 1e9,
             human_bytes(m.model->weight_bytes()));
  fmt::print("checkpoint     {} files, {} tensors, {}; {} tensors skipped (other towers / MTP)\n",
             m.checkpoint->num_files(), m.checkpoint->names().size(), human_bytes(m.checkpoint->total_bytes()),
             w.skipped.size());
  fmt::print("context        max_position_embeddings {}\n", c.max_position_embeddings);
  return 0;
}

CommandRegistration reg{{"inspect", "print the resolved configuration of a checkpoint", [](CLI::App& app) {
                           auto a = std::make_shared<InspectArgs>();
                           a->model.add_to(app);
                           app.add_flag("--json", a->json, "print JSON");
                           return [a] { return run(*a); };
                         }}};

}  // namespace
}  // namespace tessera::cli
