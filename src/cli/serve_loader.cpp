#include "cli/serve_loader.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "core/error.h"
#if TESSERA_TEST_HOOKS
#include "server/fault_injection.h"
#endif

namespace tessera::cli {

ServeLoader::ServeLoader(const engine::RuntimePlan& plan, std::unique_ptr<ops::Ops> backend, ServeTestHooks hooks)
    : plan_(plan), backend_(std::move(backend)), hooks_(hooks) {}

ServeLoader::~ServeLoader() {
  if (thread_.joinable()) thread_.join();
}

void ServeLoader::start(Callbacks callbacks) {
  TESSERA_CHECK(!thread_.joinable(), "ServeLoader::start called twice");
  callbacks_ = std::move(callbacks);
  thread_ = std::thread([this] { load(); });
}

void ServeLoader::load() {
  try {
    model::LoadProgressFn progress = [this](const model::LoadProgress& p) {
      if (callbacks_.progress) callbacks_.progress(p);
#if TESSERA_TEST_HOOKS
      // A gate file rather than a delay: tests look at the loading state for as long as they need.
      while (!p.finished && !hooks_.load_gate.empty() && !std::filesystem::exists(hooks_.load_gate))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
#endif
    };
    if (plan_.tensor_parallel_size > 1) {
      // Ranks (threads, on the CPU or a GPU each) make their own backends: no staged upload to report
      // progress of, and no start-up self-check yet.
      backend_.reset();
      ranks_ = model::load_model_ranks_for(plan_.model, plan_.tensor_parallel_size);
      engine_ = engine::build_engine(ranks_, plan_);
    } else {
      model_ = model::load_model(plan_.model, std::move(backend_), progress);
      if (callbacks_.loaded) callbacks_.loaded(model_);
#if TESSERA_TEST_HOOKS
      if (hooks_.fail_load) core::fail("injected load failure (--test-fail-load)");
      if (hooks_.fail_token >= 0) model_.model = server::make_failing_model(std::move(model_.model), hooks_.fail_token);
#endif
      engine_ = engine::build_engine(model_, plan_);
    }
#if TESSERA_TEST_HOOKS
    if (hooks_.kill_engine_token >= 0) engine_->set_test_loop_fault_token(hooks_.kill_engine_token);
#endif
    engine_->start();
    if (callbacks_.started) callbacks_.started(*engine_);
  } catch (...) {
    error_ = std::current_exception();
    engine_.reset();
    finished_ = true;
    if (callbacks_.failed) callbacks_.failed();
    return;
  }
  finished_ = true;
  if (callbacks_.ready) callbacks_.ready(*engine_);
}

engine::Engine& ServeLoader::engine() {
  TESSERA_CHECK(finished_.load(), "ServeLoader::engine before the load finished");
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
  return *engine_;
}

}  // namespace tessera::cli
