// Engine flags shared by the subcommands that run the engine (bench offline; later serve).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "model/model.h"

namespace tessera::cli {

struct EngineOptions {
  std::string kv_cache_bytes;  // empty: the default
  std::string max_model_len = "auto";
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  bool no_prefix_caching = false;
  double gpu_memory_utilization = 0.9;  // fraction of the GPU memory free before loading (GPU backends)

  void add_to(CLI::App& app);
};

// Peak activation memory of one step of `tokens` tokens on a GPU backend (fp32 activations, bf16
// copies of GEMM inputs, attention partials, logits), plus the GEMM workspace. An estimate: the
// terms are the tensors the forward allocates, not a measurement.
uint64_t activation_workspace_bytes(const io::ModelConfig& config, int64_t tokens, int64_t max_seqs);

struct BuiltEngine {
  engine::MemoryPlan plan;
  std::unique_ptr<engine::Engine> engine;
};

// Resolves the memory plan for `model` (logging it) and builds the engine over a KV pool of that size:
// --kv-cache-bytes when given; on a GPU backend --gpu-memory-utilization of the device memory (after
// the weights and a step's activations), capped at what --max-num-seqs sequences can use; else the
// CPU default.
BuiltEngine build_engine(model::LoadedModel& model, const EngineOptions& options);

}  // namespace tessera::cli
