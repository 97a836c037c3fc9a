// tessera plan: what will run and how much fits, before any weight is read — per GPU the weights,
// activation workspace and KV bytes, the KV capacity in tokens, the resolved max context, and the
// kernel chosen for each op with the reason. Exits non-zero when something cannot run.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/format.h"
#include "engine/memory_plan.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/kernel_registry.h"
#endif

namespace tessera::cli {
namespace {

struct PlanArgs {
  ModelOptions model;
  EngineOptions engine;
  double gpu_memory_utilization = 0.9;
};

std::string gib(uint64_t b) { return core::human_bytes(b); }

// Peak activation memory of one step of `tokens` tokens on the CUDA backend (fp32 activations,
// bf16 copies of GEMM inputs, attention partials), plus the cuBLASLt workspace. An estimate: the
// terms are the tensors the forward allocates, not a measurement.
[[maybe_unused]] uint64_t cuda_workspace_bytes(const io::ModelConfig& c, int64_t tokens, int64_t max_seqs) {
  const uint64_t T = tokens, H = c.hidden_size, N = c.num_attention_heads, E = c.kv_cache_entry_dim();
  const uint64_t inter = std::max<uint64_t>(c.intermediate_size, c.n_shared_experts * c.moe_intermediate_size);
  const uint64_t f32 = 4 * T * (3 * H + N * c.qk_head_dim() + N * E + 2 * N * c.kv_lora_rank + N * c.v_head_dim + E +
                                3 * inter + c.n_routed_experts);
  const uint64_t bf16 = 2 * T * std::max<uint64_t>({H, inter, N * c.v_head_dim});
  const uint64_t logits = 4 * static_cast<uint64_t>(max_seqs) * c.vocab_size;
  return f32 + bf16 + logits + (32ull << 20);
}

int run(const PlanArgs& a) {
  const std::filesystem::path dir = a.model.model_dir;
  const auto config_json = io::read_json_file(dir / "config.json");
  const io::ModelConfig cfg = io::parse_model_config(config_json, (dir / "config.json").string());
  const io::QuantConfig quant = io::load_quant_config(dir, config_json);
  auto ckpt = io::Checkpoint::open(dir);  // headers only: validates every shard, reads no weight
  std::unique_ptr<ops::Ops> backend = model::make_backend(a.model.device, a.model.kernels);
  const io::KvCacheDtypeResolution kv = io::resolve_kv_cache_dtype(
      a.model.kv_cache_dtype, quant, backend->supported_kv_dtypes(), backend->default_kv_dtype(), backend->name());
  const uint64_t params = cfg.parameter_count();

  fmt::print("model        {} ({}), {} layers, {} parameters ({:.3f} B)\n", cfg.architecture, cfg.model_type,
             cfg.num_hidden_layers, params, params / 1e9);
  fmt::print("checkpoint   {} files, {} tensors, {} on disk; quantization {}\n", ckpt->num_files(),
             ckpt->names().size(), gib(ckpt->total_bytes()), quant.method_name());
  fmt::print("kv cache     {}: {}\n", io::kv_cache_dtype_name(kv.dtype), kv.reason);
  const uint64_t kv_token =
      model::KvCache::bytes_per_token(cfg.num_hidden_layers, cfg.kv_cache_entry_dim(), kv.dtype);

  engine::MemoryPlanInput in;
  if (!a.engine.kv_cache_bytes.empty())
    in.kv_cache_bytes = engine::parse_bytes(a.engine.kv_cache_bytes, "--kv-cache-bytes");
  in.bytes_per_token = kv_token;
  in.max_position_embeddings = cfg.max_position_embeddings;
  in.max_model_len = a.engine.max_model_len;
  bool ok = true;
  if (a.model.device == "cpu") {
    fmt::print("device       cpu (fp32 reference backend)\n");
    fmt::print("weights      {} mapped from the checkpoint (not copied)\n", gib(ckpt->total_bytes()));
    fmt::print("kernels      cpu reference ops for every op (fp32, weights dequantized row by row)\n");
  }
#ifdef TESSERA_HAVE_CUDA
  if (a.model.device == "cuda") {
    const auto caps = ops::cuda::query_device_caps();
    fmt::print("device 0     {} (sm_{}), {} SMs, {} total, {} free; build carries {}\n", caps.name, caps.sm,
               caps.num_sms, gib(caps.total_bytes), gib(caps.free_bytes), ops::cuda::compiled_architectures());
    const uint64_t weights = params * 2;  // bf16 on the device after dequantization
    const uint64_t workspace = cuda_workspace_bytes(cfg, a.engine.max_num_batched_tokens, a.engine.max_num_seqs);
    const double budget = a.gpu_memory_utilization * static_cast<double>(caps.free_bytes);
    fmt::print("weights      {} (bf16 on the device)\n", gib(weights));
    fmt::print("workspace    {} (activations of a {}-token step, estimated)\n", gib(workspace),
               a.engine.max_num_batched_tokens);
    if (budget <= static_cast<double>(weights + workspace)) {
      fmt::print("memory       does NOT fit: {:.2f} x free = {} < weights + workspace = {}\n", a.gpu_memory_utilization,
                 gib(static_cast<uint64_t>(budget)), gib(weights + workspace));
      ok = false;
    } else {
      in.device_free_bytes = static_cast<uint64_t>(budget) - weights - workspace;
      in.memory_fraction = 1.0;
      fmt::print("memory       {:.2f} x free {} - weights - workspace = {} for the KV cache\n",
                 a.gpu_memory_utilization, gib(caps.free_bytes), gib(*in.device_free_bytes));
    }
    fmt::print("kernels\n");
    for (const auto& k : ops::cuda::plan_kernels(
             caps,
             {cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim,
              kv.dtype == io::KvCacheDtype::kFp8E4M3},
             cfg.n_routed_experts,
             cfg.hidden_size, cfg.moe_intermediate_size, ops::cuda::kernel_overrides_from(a.model.kernels))) {
      fmt::print("  {:<12} {:<3} {} — {}\n", k.op, k.available ? "ok" : "NO", k.kernel, k.reason);
      ok &= k.available;
    }
  }
#endif
  if (ok) {
    try {
      const engine::MemoryPlan plan = engine::plan_memory(in);
      fmt::print("kv pool      {} ({}), {} bytes per token: {} pages of 64 = {} tokens\n", gib(plan.kv_bytes),
                 plan.kv_bytes_source, kv_token, plan.num_pages, plan.token_capacity);
      fmt::print("max context  {} ({})\n", plan.max_model_len, plan.max_model_len_source);
    } catch (const core::Error& e) {
      fmt::print("kv pool      cannot be planned: {}\n", e.what());
      ok = false;
    }
  }
  fmt::print("plan         {}\n", ok ? "ok: everything above can run" : "NOT runnable: see the lines marked above");
  return ok ? 0 : 1;
}

CommandRegistration reg{{"plan", "what will run and how much fits, before loading weights", [](CLI::App& app) {
                           auto a = std::make_shared<PlanArgs>();
                           a->model.add_to(app);
                           a->engine.add_to(app);
                           app.add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                                          "fraction of free GPU memory tessera may use")
                               ->capture_default_str()
                               ->check(CLI::Range(0.01, 1.0));
                           return [a] { return run(*a); };
                         }}};

}  // namespace
}  // namespace tessera::cli
