// Engine flags shared by the subcommands that plan or run the engine (plan, serve, bench offline),
// and the start-up sequence they share: resolve the plan, log it, refuse it when it cannot run.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "cli/model_options.h"
#include "engine/runtime_plan.h"

namespace tessera::cli {

struct EngineOptions {
  std::string kv_cache_bytes;  // empty: the default
  std::string max_model_len = "auto";
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  bool no_prefix_caching = false;
  double max_step_stretch = 1.8;
  double gpu_memory_utilization = 0.9;  // fraction of the device memory for the whole process (GPU backends)
  int tensor_parallel_size = 1;
  std::string kv_cache_sharding = "auto";

  void add_to(CLI::App& app);
  engine::EngineSettings settings() const;
};

// --tensor-parallel-size and --kv-cache-sharding, as serve, plan and generate take them.
void add_tensor_parallel_option(CLI::App& app, int& size, std::string& kv_cache_sharding);

// The plan for the checkpoint in `dir` on `backend`, logged line by line; throws core::Error with its
// problems when it cannot run (nothing has been loaded yet).
engine::RuntimePlan plan_or_fail(const std::filesystem::path& dir, const ModelOptions& model,
                                 const EngineOptions& engine, const ops::Ops& backend);
// The same for settings a command derives itself (generate: one sequence of a known length).
engine::RuntimePlan plan_or_fail(const std::filesystem::path& dir, const ModelOptions& model,
                                 const engine::EngineSettings& settings, const ops::Ops& backend);

}  // namespace tessera::cli
