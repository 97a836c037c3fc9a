#include "cli/engine_options.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace tessera::cli {

void EngineOptions::add_to(CLI::App& app) {
  app.add_option("--kv-cache-bytes", kv_cache_bytes,
                 "KV cache pool size, e.g. 2GiB or 512MiB (default: the GPU budget, or 256MiB on CPU)");
  app.add_option("--max-model-len", max_model_len,
                 "longest sequence (prompt + output): auto = what one sequence can hold in the KV pool, capped by "
                 "the model's max_position_embeddings")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", max_num_batched_tokens, "tokens per engine step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-num-seqs", max_num_seqs, "sequences per engine step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-prefix-caching", no_prefix_caching, "do not reuse KV pages of equal prompt prefixes");
  app.add_option("--max-step-stretch", max_step_stretch,
                 "a step that prefills prompts beside running decodes may take at most this many times a "
                 "decode-only step (measured while serving); 1 = no pacing, prefill takes what "
                 "--max-num-batched-tokens allows")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--gpu-memory-utilization", gpu_memory_utilization,
                 "GPU backends: fraction of the device's memory the whole process may use (CUDA context, weights, "
                 "activations, KV cache); the KV cache gets what the rest leaves")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  add_tensor_parallel_option(app, tensor_parallel_size, kv_cache_sharding);
}

void add_tensor_parallel_option(CLI::App& app, int& size, std::string& kv_cache_sharding) {
  app.add_option("--tensor-parallel-size", size,
                 "split the model over this many ranks: attention heads, routed experts and MLP columns; must "
                 "divide the attention heads. Ranks are threads of this process: on --device cpu the CPU backend's, on "
                 "cuda GPUs 0..N-1, one a rank, joined by NCCL")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-cache-sharding", kv_cache_sharding,
                 "with several ranks: position (each rank stores 1/N of every sequence's KV cache: N times the "
                 "tokens, three more collectives per attention), none (the whole cache on every rank), or auto "
                 "(none when one sequence of --max-model-len fits the whole cache, else position)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "position", "none"}));
}

engine::EngineSettings EngineOptions::settings() const {
  engine::EngineSettings s;
  s.kv_cache_bytes = kv_cache_bytes;
  s.max_model_len = max_model_len;
  s.max_num_batched_tokens = max_num_batched_tokens;
  s.max_num_seqs = max_num_seqs;
  s.prefix_caching = !no_prefix_caching;
  s.max_step_stretch = max_step_stretch;
  s.gpu_memory_utilization = gpu_memory_utilization;
  s.tensor_parallel_size = tensor_parallel_size;
  s.kv_cache_sharding = kv_cache_sharding;
  return s;
}

engine::RuntimePlan plan_or_fail(const std::filesystem::path& dir, const ModelOptions& model,
                                 const EngineOptions& engine, const ops::Ops& backend) {
  return plan_or_fail(dir, model, engine.settings(), backend);
}

engine::RuntimePlan plan_or_fail(const std::filesystem::path& dir, const ModelOptions& model,
                                 const engine::EngineSettings& settings, const ops::Ops& backend) {
  engine::RuntimePlan plan = engine::resolve_plan(dir, model.load_options(), settings, backend);
  for (const std::string& line : plan.lines()) spdlog::info("plan: {}", line);
  if (!plan.ok()) {
    std::string all;
    for (const auto& p : plan.problems) all += (all.empty() ? "" : "; ") + p;
    core::fail("{}: the plan cannot run ({}); `tessera plan` with the same flags shows it", dir.string(), all);
  }
  return plan;
}

}  // namespace tessera::cli
