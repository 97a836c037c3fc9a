#include "cli/engine_options.h"

#include <spdlog/spdlog.h>

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
}

BuiltEngine build_engine(model::LoadedModel& m, const EngineOptions& o) {
  engine::MemoryPlanInput in;
  if (!o.kv_cache_bytes.empty()) in.kv_cache_bytes = engine::parse_bytes(o.kv_cache_bytes, "--kv-cache-bytes");
  in.bytes_per_token = model::KvCache::bytes_per_token(m.config.num_hidden_layers, m.config.kv_cache_entry_dim(),
                                                       m.kv_cache.dtype);
  in.page_size = model::kKvPageSize;
  in.max_position_embeddings = m.config.max_position_embeddings;
  in.max_model_len = o.max_model_len;
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
