#include "engine/runtime_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <cstdlib>

#include "core/env.h"
#include "core/error.h"
#include "core/format.h"
#include "engine/tensor_parallel_executor.h"
#include "io/checkpoint.h"
#include "model/kv_cache.h"
#include "ops/backend.h"

namespace tessera::engine {

namespace {
std::string gib(uint64_t b) { return core::human_bytes(b); }
// The KV pool of `in` with the ranks' cache sharded by position or whole on every rank, as
// --kv-cache-sharding says (auto: whole when that holds one sequence of the longest allowed length,
// which spares each layer's attention three collectives; else sharded, N times the tokens). Sets
// p.kv_sharded and its reason; throws as plan_memory does.
MemoryPlan plan_kv_sharding(MemoryPlanInput in, const EngineSettings& s, RuntimePlan& p) {
  const int n = s.tensor_parallel_size;
  const std::string& choice = s.kv_cache_sharding;
  TESSERA_CHECK(choice == "auto" || choice == "position" || choice == "none",
                "--kv-cache-sharding '{}': expected auto, position or none", choice);
  if (n <= 1) return plan_memory(in);
  MemoryPlanInput sharded = in;
  sharded.kv_shards = n;
  if (choice != "auto") {
    p.kv_sharded = choice == "position";
    p.kv_sharding_reason = fmt::format("--kv-cache-sharding {}", choice);
    return plan_memory(p.kv_sharded ? sharded : in);
  }
  const bool auto_length = in.max_model_len.empty() || in.max_model_len == "auto";
  const int64_t longest =
      auto_length ? in.max_position_embeddings : std::strtoll(in.max_model_len.c_str(), nullptr, 10);
  // The whole cache's plan; when --max-model-len does not fit it, its capacity at any length.
  std::optional<MemoryPlan> whole;
  int64_t whole_tokens = 0;
  try {
    whole = plan_memory(in);
    whole_tokens = whole->token_capacity;
  } catch (const core::Error&) {
    MemoryPlanInput any_length = in;
    any_length.max_model_len = "auto";
    whole_tokens = plan_memory(any_length).token_capacity;
  }
  if (whole && longest <= whole_tokens) {
    p.kv_sharding_reason = fmt::format(
        "auto: none, the whole cache on every rank holds {} tokens, so a {}-token sequence fits (no KV collectives "
        "in the attention; --kv-cache-sharding position would hold {} times the tokens)",
        whole_tokens, longest, n);
    return *whole;
  }
  p.kv_sharded = true;
  MemoryPlan m = plan_memory(sharded);
  p.kv_sharding_reason = fmt::format(
      "auto: position, the whole cache on every rank would hold {} tokens, fewer than a {}-token sequence needs; "
      "sharded over {} ranks it holds {}",
      whole_tokens, longest, n, m.token_capacity);
  return m;
}

}  // namespace

uint64_t activation_workspace_bytes(const io::ModelConfig& c, int64_t tokens, int64_t max_seqs) {
  const uint64_t T = tokens, H = c.hidden_size, N = c.num_attention_heads, E = c.kv_cache_entry_dim();
  const uint64_t inter = std::max<uint64_t>(c.intermediate_size, c.n_shared_experts * c.moe_intermediate_size);
  const uint64_t f32 = 4 * T *
                       (3 * H + N * c.qk_head_dim() + N * E + 2 * N * c.kv_lora_rank + N * c.v_head_dim + E +
                        3 * inter + c.n_routed_experts);
  const uint64_t bf16 = 2 * T * std::max<uint64_t>({H, inter, N * c.v_head_dim});
  const uint64_t logits = 4 * static_cast<uint64_t>(max_seqs) * c.vocab_size;
  // The routed experts' grouped kernels at any step size (quantized experts run prefill there too):
  // per token-expert pair its fp32 output row, its bf16 activation row and its sorted index.
  const uint64_t pairs = c.n_routed_experts > 0 ? T * static_cast<uint64_t>(c.num_experts_per_tok) : 0;
  const uint64_t routed = pairs * (4 * H + 2 * static_cast<uint64_t>(c.moe_intermediate_size) + 4);
  return f32 + bf16 + logits + routed + (32ull << 20);
}

RuntimePlan resolve_plan(const std::filesystem::path& dir, const model::LoadOptions& model_options,
                         const EngineSettings& s, const ops::Ops& backend) {
  RuntimePlan p;
  p.model = model::resolve_model(dir, model_options, backend);
  const io::ModelConfig& cfg = p.model.config;
  p.backend = backend.plan(cfg, p.model.kv_cache.dtype, p.model.linears);
  p.tensor_parallel_size = s.tensor_parallel_size;
  if (s.tensor_parallel_size != 1) {
    try {
      model::check_tensor_parallel(cfg, s.tensor_parallel_size);
      p.rank_weight_bytes = model::rank_weight_bytes(p.model, {0, s.tensor_parallel_size});
    } catch (const core::Error& e) {
      p.problems.push_back(e.what());
    }
    // On GPUs: rank r on GPU r over NCCL (model::RankDevices::kOnePerGpu), which this build and
    // machine must offer.
    if (p.backend.free_bytes) {
      const ops::RankGroupKind nccl = ops::rank_group_kind(backend.name(), s.tensor_parallel_size, "nccl");
      if (!nccl.problem.empty()) {
        p.problems.push_back(fmt::format("--tensor-parallel-size {}: {}", s.tensor_parallel_size, nccl.problem));
      } else {
        // Measured now, so that the plan prints what the ranks will run (load_model_ranks takes it).
        try {
          p.model.collectives = ops::choose_collectives(s.tensor_parallel_size);
        } catch (const core::Error& e) {
          p.problems.push_back(
              fmt::format("--tensor-parallel-size {}: collectives: {}", s.tensor_parallel_size, e.what()));
        }
      }
    }
  }
  for (const auto& k : p.backend.kernels)
    if (!k.available) p.problems.push_back(fmt::format("no kernel can run {}: {}", k.op, k.reason));
  for (const core::EnvSwitch& e : core::env_switches())
    if (const auto v = core::env_value(e.name)) p.environment.push_back(fmt::format("{}={} ({})", e.name, *v, e.doc));

  MemoryPlanInput in;
  if (!s.kv_cache_bytes.empty()) in.kv_cache_bytes = parse_bytes(s.kv_cache_bytes, "--kv-cache-bytes");
  in.bytes_per_token =
      model::KvCache::bytes_per_token(cfg.num_hidden_layers, cfg.kv_cache_entry_dim(), p.model.kv_cache.dtype);
  in.page_size = model::kKvPageSize;
  in.max_position_embeddings = cfg.max_position_embeddings;
  in.max_model_len = s.max_model_len;
  in.max_num_seqs = s.max_num_seqs;
  if (p.backend.free_bytes) {
    // A device backend: what is in use now (the CUDA context), the weights, a step's activations
    // and the runtime's own memory come out of u x the device's memory; the KV pool gets the rest
    // (device_kv_budget), or --kv-cache-bytes.
    p.workspace_bytes = activation_workspace_bytes(cfg, s.max_num_batched_tokens, s.max_num_seqs);
    // Ranks on GPUs of their own: each GPU holds its rank's share (rank 0's, the largest), measured
    // against this GPU's memory (the ranks' GPUs are taken to be alike).
    const uint64_t weights = s.tensor_parallel_size > 1 ? p.rank_weight_bytes : p.backend.weight_bytes;
    // The ranks' collectives: what the start-up measurement found (or its estimate).
    const uint64_t collectives = p.model.collectives ? p.model.collectives->device_bytes : 0;
    p.device_use = DeviceMemoryUse{p.backend.total_bytes,
                                   p.backend.total_bytes - *p.backend.free_bytes,
                                   weights,
                                   p.workspace_bytes,
                                   kRuntimeReserveBytes,
                                   collectives,
                                   p.backend.table_bytes};
    if (weights >= *p.backend.free_bytes) {
      p.problems.push_back(fmt::format("the weights ({}{}) do not fit in the free device memory ({})", gib(weights),
                                       s.tensor_parallel_size > 1 ? " of rank 0's share" : "",
                                       gib(*p.backend.free_bytes)));
    } else if (!in.kv_cache_bytes) {
      try {
        in.kv_budget_bytes = device_kv_budget(p.device_use, s.gpu_memory_utilization);
        in.kv_budget_source = fmt::format("--gpu-memory-utilization {:.2f}", s.gpu_memory_utilization);
      } catch (const core::Error& e) {
        p.problems.push_back(e.what());
      }
    }
  }
  if (p.problems.empty() || p.backend.free_bytes == std::nullopt) {
    try {
      p.memory = plan_kv_sharding(in, s, p);
    } catch (const core::Error& e) {
      p.problems.push_back(fmt::format("the KV pool cannot be planned: {}", e.what()));
    }
  }
  if (p.backend.free_bytes && p.memory.kv_bytes > 0) {
    const DeviceMemoryUse& u = p.device_use;
    p.predicted_device_bytes =
        u.in_use + u.weights + u.workspace + u.runtime + u.collectives + u.tables + p.memory.kv_bytes;
    p.memory_budget = fmt::format(
        "{} predicted on the device after load and a full step (in use now {} + weights {} + workspace {} + "
        "runtime {}{}{} + KV pool {}); --gpu-memory-utilization {:.2f} allows {} of {}",
        gib(p.predicted_device_bytes), gib(u.in_use), gib(u.weights), gib(u.workspace), gib(u.runtime),
        u.collectives > 0 ? " + collectives " + gib(u.collectives) : "",
        u.tables > 0 ? fmt::format(" + kernel tables {} ({})", gib(u.tables), p.backend.table_rule) : "",
        gib(p.memory.kv_bytes), s.gpu_memory_utilization,
        gib(static_cast<uint64_t>(s.gpu_memory_utilization * static_cast<double>(u.total))), gib(u.total));
    if (in.kv_cache_bytes && p.predicted_device_bytes > u.total)
      p.problems.push_back(fmt::format("--kv-cache-bytes {}: the device would need {} but has {}",
                                       gib(p.memory.kv_bytes), gib(p.predicted_device_bytes), gib(u.total)));
  }
  p.engine.max_num_batched_tokens = s.max_num_batched_tokens;
  p.engine.max_num_seqs = s.max_num_seqs;
  p.engine.max_model_len = p.memory.max_model_len;
  p.engine.enable_prefix_caching = s.prefix_caching;
  p.engine.max_step_stretch = s.max_step_stretch;
  return p;
}

std::vector<std::string> kernel_lines(const ops::BackendPlan& backend) {
  std::vector<std::string> out{"kernels"};
  for (const auto& k : backend.kernels)
    out.push_back(fmt::format(
        "  {:<12} {:<3} {} — {}{}", k.op, k.available ? "ok" : "NO", k.kernel, k.reason,
        k.alternatives.empty() ? "" : fmt::format(" (other choices: --kernels {})", fmt::join(k.alternatives, ", "))));
  out.push_back(fmt::format("{:<12} {}", "decode steps", backend.decode_steps));
  return out;
}

std::vector<std::string> RuntimePlan::lines() const {
  const io::ModelConfig& cfg = model.config;
  std::vector<std::string> out;
  auto add = [&](const char* label, const std::string& text) { out.push_back(fmt::format("{:<12} {}", label, text)); };
  const uint64_t params = cfg.parameter_count();
  add("model", fmt::format("{} ({}), {} layers, {} parameters ({:.3f} B)", cfg.architecture, cfg.model_type,
                           cfg.num_hidden_layers, params, params / 1e9));
  add("quantization", fmt::format("{}{}", model.quant.method_name(),
                                  model.quant.source.empty() ? "" : " (from " + model.quant.source + ")"));
  add("latent eps", fmt::format("{:g} ({})", cfg.latent_norm_eps, cfg.latent_norm_eps_source));
  add("kv cache", fmt::format("{}: {}", core::kv_cache_dtype_name(model.kv_cache.dtype), model.kv_cache.reason));
  add("device", backend.device);
  add("weights", backend.weight_bytes > 0 ? fmt::format("{} ({})", gib(backend.weight_bytes), backend.weight_rule)
                                          : backend.weight_rule);
  if (backend.free_bytes) {
    add("workspace", fmt::format("{} (activations of a {}-token step, estimated)", gib(workspace_bytes),
                                 engine.max_num_batched_tokens));
    if (!memory_budget.empty()) add("memory", memory_budget);
  }
  for (auto& line : kernel_lines(backend)) out.push_back(std::move(line));
  const uint64_t token_bytes =
      model::KvCache::bytes_per_token(cfg.num_hidden_layers, cfg.kv_cache_entry_dim(), model.kv_cache.dtype);
  if (tensor_parallel_size > 1 && !kv_sharding_reason.empty())
    add("kv sharding", fmt::format("{} ({})",
                                   kv_sharded ? "by position over the ranks"
                                              : "none: the whole cache on "
                                                "every rank",
                                   kv_sharding_reason));
  if (memory.num_pages > 0) {
    if (tensor_parallel_size > 1 && kv_sharded) {
      const int n = tensor_parallel_size;
      add("kv pool", fmt::format("{} on each of {} ranks ({}), sharded by position: a rank stores {} of every "
                                 "{}-token page ({} bytes per token on the rank that holds it): {} pages = {} tokens",
                                 gib(memory.kv_bytes), n, memory.kv_bytes_source, model::kKvPageSize,
                                 memory.page_tokens, token_bytes, memory.num_pages, memory.token_capacity));
    } else {
      add("kv pool", fmt::format("{} ({}), {} bytes per token: {} pages of {} = {} tokens", gib(memory.kv_bytes),
                                 memory.kv_bytes_source, token_bytes, memory.num_pages, memory.page_tokens,
                                 memory.token_capacity));
    }
    add("max context", fmt::format("{} ({})", memory.max_model_len, memory.max_model_len_source));
  }
  if (tensor_parallel_size > 1) {
    const int n = tensor_parallel_size;
    add("parallel",
        fmt::format(
            "{} ranks ({}), each with {} of {} attention heads, {}-{} of {} "
            "routed experts, 1/{} of the MLP columns and of lm_head, {}; {} of the checkpoint's "
            "weights on rank 0 (the most)",
            n,
            backend.free_bytes
                ? fmt::format("threads of this process on GPUs 0-{}, joined as the collectives lines say", n - 1)
                : "threads of this process",
            cfg.num_attention_heads / n, cfg.num_attention_heads, cfg.n_routed_experts / n,
            (cfg.n_routed_experts + n - 1) / n, cfg.n_routed_experts, n,
            kv_sharded ? fmt::format("1/{} of the KV cache", n) : "the KV pool above", gib(rank_weight_bytes)));
  }
  if (model.collectives)
    for (const auto& line : ops::describe(*model.collectives)) add("collectives", line);
  add("engine",
      fmt::format("{} tokens and {} sequences a step, prefix caching {}, {}", engine.max_num_batched_tokens,
                  engine.max_num_seqs, engine.enable_prefix_caching ? "on" : "off",
                  engine.max_step_stretch > 1
                      ? fmt::format("prefill beside decodes paced to {:g}x a decode step", engine.max_step_stretch)
                      : std::string("prefill beside decodes not paced")));
  if (environment.empty()) {
    add("environment", "no TESSERA_* variable set");
  } else {
    for (const auto& e : environment) add("environment", e);
  }
  for (const auto& problem : problems) add("problem", problem);
  add("plan", ok() ? "ok: everything above can run" : "NOT runnable: see the problems above");
  return out;
}

namespace {
// After loading, before the KV pool is allocated: the device of `ops` (a rank's: `who`) must still
// have room for the plan's KV pages and a step's activations, else a clear error now rather than an
// out-of-memory error at the first long step. Nothing for the CPU backend.
void check_room_after_load(ops::Ops& ops, const RuntimePlan& plan, const std::string& who, uint64_t counted) {
  const auto mem = ops.device_memory();
  if (!mem) return;
  const io::ModelConfig& cfg = plan.model.config;
  const uint64_t kv_bytes =
      static_cast<uint64_t>(plan.memory.num_pages) * model::kKvPageSize *
      model::KvCache::bytes_per_token(cfg.num_hidden_layers, cfg.kv_cache_entry_dim(), plan.model.kv_cache.dtype);
  TESSERA_CHECK(mem->free_bytes >= kv_bytes + plan.workspace_bytes,
                "after loading, {}{} of device memory are free but the plan needs {} for the KV pool and {} for a "
                "step's activations: the weights took {} where the plan counted {}; lower "
                "--gpu-memory-utilization or set --kv-cache-bytes",
                who, gib(mem->free_bytes), gib(kv_bytes), gib(plan.workspace_bytes), gib(mem->held_bytes),
                gib(counted));
}
}  // namespace

std::unique_ptr<Engine> build_engine(model::LoadedModel& m, const RuntimePlan& plan) {
  TESSERA_CHECK(plan.ok(), "the start-up plan cannot run: {}", plan.problems.front());
  TESSERA_CHECK(plan.tensor_parallel_size == 1,
                "--tensor-parallel-size {}: this command runs one rank (serve and generate run several)",
                plan.tensor_parallel_size);
  check_room_after_load(m.model->ops(), plan, "", plan.backend.weight_bytes);
  return std::make_unique<Engine>(std::make_unique<LocalExecutor>(*m.model, m.make_kv_cache(plan.memory.num_pages)),
                                  plan.engine);
}

std::unique_ptr<Engine> build_engine(model::LoadedRanks& ranks, const RuntimePlan& plan) {
  TESSERA_CHECK(plan.ok(), "the start-up plan cannot run: {}", plan.problems.front());
  TESSERA_CHECK(static_cast<int>(ranks.ranks.size()) == plan.tensor_parallel_size,
                "build_engine: {} ranks loaded for a plan of {}", ranks.ranks.size(), plan.tensor_parallel_size);
  // Every GPU is checked: the plan measured one (the ranks' GPUs are taken to be alike, and another
  // process may hold memory on one of them).
  for (size_t r = 0; r < ranks.ranks.size(); ++r)
    check_room_after_load(ranks.ranks[r]->ops(), plan, fmt::format("on rank {}'s GPU, ", r), plan.rank_weight_bytes);
  return std::make_unique<Engine>(
      std::make_unique<TensorParallelExecutor>(ranks, plan.memory.num_pages,
                                               model::RankKvLayout{plan.kv_sharded, model::kKvPageSize}),
      plan.engine);
}

}  // namespace tessera::engine
