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
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_registry.h"
#endif

namespace tessera::cli {
namespace {

struct PlanArgs {
  ModelOptions model;
  EngineOptions engine;
};

std::string gib(uint64_t b) { return core::human_bytes(b); }

int run(const PlanArgs& a) {
  const std::filesystem::path dir = a.model.model_dir;
  const auto config_json = io::read_json_file(dir / "config.json");
  const io::ModelConfig cfg = io::parse_model_config(config_json, (dir / "config.json").string());
  const io::QuantConfig quant = io::load_quant_config(dir, config_json);
  auto ckpt = io::Checkpoint::open(dir);  // headers only: validates every shard, reads no weight
  std::unique_ptr<ops::Ops> backend = model::make_backend(a.model.device, a.model.kernels, a.model.enforce_eager);
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
  in.max_num_seqs = a.engine.max_num_seqs;
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
    const uint64_t workspace =
        activation_workspace_bytes(cfg, a.engine.max_num_batched_tokens, a.engine.max_num_seqs);
    const double u = a.engine.gpu_memory_utilization;
    fmt::print("weights      {} (bf16 on the device)\n", gib(weights));
    fmt::print("workspace    {} (activations of a {}-token step, estimated)\n", gib(workspace),
               a.engine.max_num_batched_tokens);
    // The same budget serve computes after loading (engine::device_kv_budget), with the weights
    // still to come out of today's free memory.
    try {
      TESSERA_CHECK(caps.free_bytes > weights, "the weights ({}) do not fit in the free device memory ({})",
                    gib(weights), gib(caps.free_bytes));
      in.device_free_bytes = engine::device_kv_budget(caps.free_bytes - weights, weights, workspace, u);
      in.memory_fraction = 1.0;
      in.device_free_source = fmt::format("--gpu-memory-utilization {:.2f}", u);
      fmt::print("memory       {:.2f} x free {} - weights - workspace = {} for the KV cache\n", u,
                 gib(caps.free_bytes), gib(*in.device_free_bytes));
    } catch (const core::Error& e) {
      fmt::print("memory       does NOT fit: {}\n", e.what());
      ok = false;
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
    fmt::print("decode steps {}\n",
               !ops::cuda::step_graphs_enabled(!a.model.enforce_eager)
                   ? "kernels launched one by one (--enforce-eager or TESSERA_CUDA_GRAPHS=0)"
                   : "CUDA graphs: recorded per batch size (up to 256 sequences) on its second step, then "
                     "replayed (--enforce-eager turns them off)");
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
                           return [a] { return run(*a); };
                         }}};

}  // namespace
}  // namespace tessera::cli
