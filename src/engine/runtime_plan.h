// The start-up plan (DESIGN.md "Configuration resolution"): every setting resolved once, before any
// weight is read, with where each value came from. `tessera plan` prints it; `serve`, `bench
// offline` and the engine run exactly it (load_model takes its model part, build_engine its memory
// and engine parts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace tessera::engine {

// The engine's settings as given (flags or a config file), before resolution.
struct EngineSettings {
  std::string kv_cache_bytes;             // --kv-cache-bytes; empty: the device budget or the CPU default
  std::string max_model_len = "auto";     // --max-model-len
  int64_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens
  int64_t max_num_seqs = 256;             // --max-num-seqs
  bool prefix_caching = true;             // --no-prefix-caching turns it off
  double max_step_stretch = 1.8;          // --max-step-stretch (EngineConfig::max_step_stretch)
  double gpu_memory_utilization = 0.9;    // --gpu-memory-utilization: of the device's memory, for the whole process
  int tensor_parallel_size = 1;           // --tensor-parallel-size: ranks the model is split over
  // --kv-cache-sharding, with several ranks: "position" (each rank stores 1/N of every sequence,
  // model/kv_shard.h), "none" (the whole cache on every rank) or "auto" (none when the whole cache
  // holds one sequence of the longest allowed length, else position).
  std::string kv_cache_sharding = "auto";
};

struct RuntimePlan {
  model::ModelPlan model;                // config, quantization, KV dtype
  ops::BackendPlan backend;              // device, kernels, weight bytes on the device
  std::vector<std::string> environment;  // "NAME=value (what it does)", for each TESSERA_* switch set
  uint64_t workspace_bytes = 0;          // a step's activations on a device backend (an estimate)
  MemoryPlan memory;                     // KV pool, pages, max model length
  DeviceMemoryUse device_use;            // a device backend's memory besides the KV pool
  uint64_t predicted_device_bytes = 0;   // device memory in use after load and a full step (0 on the CPU)
  std::string memory_budget;             // how the device memory adds up ("" on the CPU)
  EngineConfig engine;
  int tensor_parallel_size = 1;       // ranks (model/tensor_parallel.h); > 1 runs on CPU ranks as threads
  bool kv_sharded = false;            // the ranks' KV cache sharded by position (else whole on every rank)
  uint64_t rank_weight_bytes = 0;     // checkpoint bytes of rank 0's share (it holds the most experts)
  std::string kv_sharding_reason;     // why, for the plan's line
  std::vector<std::string> problems;  // why it cannot run; empty = runnable

  bool ok() const { return problems.empty(); }
  // The plan as `tessera plan` prints it, a line each (serve logs the same lines).
  std::vector<std::string> lines() const;
};

// The backend plan's kernel choices and how decode steps launch, as `tessera plan` prints them (also
// printed by `bench decode`, whose synthetic model has no checkpoint to resolve a whole plan from).
std::vector<std::string> kernel_lines(const ops::BackendPlan& backend);

// Device memory the runtime takes after planning outside the backend's allocations: cuBLAS(Lt)
// handles and workspaces, kernel modules loaded on first use. Measured on an H200 (docs/PERFORMANCE.md,
// "Memory plan"); part of the plan's prediction and budget.
inline constexpr uint64_t kRuntimeReserveBytes = 256ull << 20;

// Peak activation memory of one step of `tokens` tokens on a GPU backend (fp32 activations, bf16
// copies of GEMM inputs, attention partials, the routed experts' rows per token-expert pair,
// logits), plus the GEMM workspace. An estimate: the
// terms are the tensors the forward allocates, not a measurement.
uint64_t activation_workspace_bytes(const io::ModelConfig& config, int64_t tokens, int64_t max_seqs);

// Resolves the plan for the checkpoint in `dir` on `backend` (which has loaded nothing). Problems
// that make the plan unrunnable (no kernel, memory that does not fit) are collected in `problems`;
// a bad flag or file throws core::Error naming it.
RuntimePlan resolve_plan(const std::filesystem::path& dir, const model::LoadOptions& model_options,
                         const EngineSettings& settings, const ops::Ops& backend);

// The engine the plan describes, over `model` loaded by load_model(plan.model, ...). On a device
// backend it first checks that what loading left free still holds the planned KV pool and a step's
// activations, and fails naming both numbers if not (instead of an out-of-memory error later).
// A plan of several ranks is refused here: it runs through build_engine(LoadedRanks&, ...).
std::unique_ptr<Engine> build_engine(model::LoadedModel& model, const RuntimePlan& plan);

// The engine of a plan of plan.tensor_parallel_size ranks over `ranks` (load_model_ranks(plan.model,
// ...)): a TensorParallelExecutor whose ranks each hold the planned KV pool. `ranks` must outlive it.
std::unique_ptr<Engine> build_engine(model::LoadedRanks& ranks, const RuntimePlan& plan);

}  // namespace tessera::engine
