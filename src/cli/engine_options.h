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

  void add_to(CLI::App& app);
};

struct BuiltEngine {
  engine::MemoryPlan plan;
  std::unique_ptr<engine::Engine> engine;
};

// Resolves the memory plan for `model` (logging it) and builds the engine over a KV pool of that size.
BuiltEngine build_engine(model::LoadedModel& model, const EngineOptions& options);

}  // namespace tessera::cli
