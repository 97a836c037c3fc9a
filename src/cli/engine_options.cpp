#include "cli/engine_options.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace tessera::cli {

void EngineOptions::add_to(CLI::App& app) {
  app.add_option("--kv-cache-bytes", kv_cache_bytes, "KV cache pool size, e.g. 2GiB or 512MiB (default 256MiB on CPU)");
  app.add_option("--max-model-len", max_model_len,
                 "longest sequence (prompt + output): auto = what one sequence can hold in the KV pool, capped by "
                 "the model's max_position_embeddings")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", max_num_batched_tokens, "tokens per engine step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-num-seqs", max_num_seqs, "sequences per engine step")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-prefix-caching", no_prefix_caching, "do not reuse KV pages of equal prompt prefixes");
  app.add_option("--gpu-memory-utilization", gpu_memory_utilization,
                 "GPU backends: fraction of the device memory free before loading that tessera may use (weights, "
                 "activations and the KV cache)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
}

uint64_t activation_workspace_bytes(const io::ModelConfig& c, int64_t tokens, int64_t max_seqs) {
  const uint64_t T = tokens, H = c.hidden_size, N = c.num_attention_heads, E = c.kv_cache_entry_dim();
  const uint64_t inter = std::max<uint64_t>(c.intermediate_size, c.n_shared_experts * c.moe_intermediate_size);
  const uint64_t f32 = 4 * T * (3 * H + N * c.qk_head_dim() + N * E + 2 * N * c.kv_lora_rank + N * c.v_head_dim + E +
                                3 * inter + c.n_routed_experts);
  const uint64_t bf16 = 2 * T * std::max<uint64_t>({H, inter, N * c.v_head_dim});
  const uint64_t logits = 4 * static_cast<uint64_t>(max_seqs) * c.vocab_size;
  return f32 + bf16 + logits + (32ull << 20);
}

BuiltEngine build_engine(model::LoadedModel& m, const EngineOptions& o) {
  engine::MemoryPlanInput in;
  if (!o.kv_cache_bytes.empty()) in.kv_cache_bytes = engine::parse_bytes(o.kv_cache_bytes, "--kv-cache-bytes");
  in.bytes_per_token = model::KvCache::bytes_per_token(m.config.num_hidden_layers, m.config.kv_cache_entry_dim(),
                                                       m.kv_cache.dtype);
  in.page_size = model::kKvPageSize;
  in.max_position_embeddings = m.config.max_position_embeddings;
  in.max_model_len = o.max_model_len;
  in.max_num_seqs = o.max_num_seqs;
  if (!in.kv_cache_bytes) {
    if (const auto mem = m.model->ops().device_memory()) {
      const uint64_t workspace = activation_workspace_bytes(m.config, o.max_num_batched_tokens, o.max_num_seqs);
      in.device_free_bytes = engine::device_kv_budget(mem->free_bytes, mem->held_bytes, workspace,
                                                      o.gpu_memory_utilization);
      in.memory_fraction = 1.0;
      in.device_free_source = fmt::format("--gpu-memory-utilization {:.2f}: {:.2f} GiB free, {:.2f} GiB held, "
                                          "{:.2f} GiB for a step's activations",
                                          o.gpu_memory_utilization, mem->free_bytes / double(1 << 30),
                                          mem->held_bytes / double(1 << 30), workspace / double(1 << 30));
    }
  }
  BuiltEngine b;
  b.plan = engine::plan_memory(in);
  spdlog::info("{}", b.plan.describe());
  engine::EngineConfig cfg;
  cfg.max_num_batched_tokens = o.max_num_batched_tokens;
  cfg.max_num_seqs = o.max_num_seqs;
  cfg.max_model_len = b.plan.max_model_len;
  cfg.enable_prefix_caching = !o.no_prefix_caching;
  b.engine = std::make_unique<engine::Engine>(*m.model, m.make_kv_cache(b.plan.num_pages), cfg);
  return b;
}

}  // namespace tessera::cli
