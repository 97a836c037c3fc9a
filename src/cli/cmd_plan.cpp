// tessera plan: what will run and how much fits, before any weight is read — the start-up plan
// (engine/runtime_plan.h) that serve and bench offline then run: the device, the weights, activation
// workspace and KV bytes, the KV capacity in tokens, the resolved max context, the kernel chosen for
// each op with the reason, and the TESSERA_* switches in force. Exits non-zero when something
// cannot run.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/model_options.h"
#include "core/format.h"
#include "io/checkpoint.h"

namespace tessera::cli {
namespace {

struct PlanArgs {
  ModelOptions model;
  EngineOptions engine;
};

int run(const PlanArgs& a) {
  std::unique_ptr<ops::Ops> backend = a.model.make_backend();
  const engine::RuntimePlan plan =
      engine::resolve_plan(a.model.model_dir, a.model.load_options(), a.engine.settings(), *backend);
  auto ckpt = io::Checkpoint::open(a.model.model_dir);  // headers only: validates every shard, reads no weight
  const std::vector<std::string> lines = plan.lines();
  for (size_t i = 0; i < lines.size(); ++i) {
    fmt::print("{}\n", lines[i]);
    if (i == 0)
      fmt::print("{:<12} {} files, {} tensors, {} on disk\n", "checkpoint", ckpt->num_files(), ckpt->names().size(),
                 core::human_bytes(ckpt->total_bytes()));
  }
  return plan.ok() ? 0 : 1;
}

CommandRegistration reg{{"plan", "what will run and how much fits, before loading weights", [](CLI::App& app) {
                           auto a = std::make_shared<PlanArgs>();
                           a->model.add_to(app);
                           a->engine.add_to(app);
                           return [a] { return run(*a); };
                         }}};

}  // namespace
}  // namespace tessera::cli
