// The model of `tessera serve`, loaded on a thread of its own while the HTTP server already answers
// (readiness 503 "loading" with the progress, liveness 200): the weights (model::load_model, its
// progress reported to the server), then the engine, built, started and handed to the server. A
// failure stops the server's listener and is rethrown by engine(), so `serve` still exits 1 with
// the message.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine/runtime_plan.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace tessera::cli {

// Test-only faults and delays (`serve --test-*` flags, TESSERA_TEST_HOOKS builds); all off by default.
struct ServeTestHooks {
  std::string load_gate;           // the load stalls after it began until this file exists (the "loading" state)
  bool fail_load = false;          // the load fails after reading the weights
  int32_t fail_token = -1;         // the forward pass fails on steps containing this token
  int32_t kill_engine_token = -1;  // the engine thread dies on taking in a request containing it
};

class ServeLoader {
 public:
  struct Callbacks {
    model::LoadProgressFn progress;                   // on the loading thread
    std::function<void(model::LoadedModel&)> loaded;  // the weights are loaded (the start-up self-check); may throw
    std::function<void(engine::Engine&)> started;     // the engine is started, not yet served (the warm-up); may throw
    std::function<void(engine::Engine&)> ready;       // the engine is started and ready to serve
    std::function<void()> failed;                     // the load threw (engine() rethrows it)
  };

  ServeLoader(const engine::RuntimePlan& plan, std::unique_ptr<ops::Ops> backend, ServeTestHooks hooks = {});
  // Waits for a load still running: destroy it only when finished() (serve exits without
  // destroying it otherwise).
  ~ServeLoader();
  ServeLoader(const ServeLoader&) = delete;
  ServeLoader& operator=(const ServeLoader&) = delete;

  void start(Callbacks callbacks);
  // The load ended, either way.
  bool finished() const { return finished_.load(); }
  // After finished(): the started engine, or the load's exception rethrown.
  engine::Engine& engine();

 private:
  void load();

  const engine::RuntimePlan& plan_;
  std::unique_ptr<ops::Ops> backend_;
  ServeTestHooks hooks_;
  Callbacks callbacks_;
  model::LoadedModel model_;
  model::LoadedRanks ranks_;                // with --tensor-parallel-size > 1, instead of model_
  std::unique_ptr<engine::Engine> engine_;  // destroyed (stopped) before model_ and ranks_, whose weights it uses
  std::exception_ptr error_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace tessera::cli
