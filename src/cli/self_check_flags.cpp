#include "cli/self_check_flags.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "model/self_check.h"
#if TESSERA_TEST_HOOKS
#include "ops/perturbed_ops.h"
#endif

namespace tessera::cli {

void SelfCheckFlags::add_to(CLI::App& app) {
  app.add_flag("--skip-self-check", skip,
               "start without the start-up self-check (the first layers of a fixed prompt on the backend, each op "
               "compared with the CPU reference)");
#if TESSERA_TEST_HOOKS
  app.add_option("--test-perturb-op", test_perturb_op,
                 "TESTS ONLY: make the backend's op OP wrong (its output doubled; 'none': wrap only), so that the "
                 "self-check runs, also on --device cpu, and must find it");
#endif
}

std::unique_ptr<ops::Ops> SelfCheckFlags::wrap(std::unique_ptr<ops::Ops> backend) const {
#if TESSERA_TEST_HOOKS
  if (!test_perturb_op.empty()) return ops::make_perturbed_ops(std::move(backend), test_perturb_op);
#endif
  return backend;
}

void SelfCheckFlags::run_or_fail(model::LoadedModel& m, const std::string& device) const {
  if (skip) {
    spdlog::warn(
        "self-check: skipped (--skip-self-check): the backend's kernels are not compared with the CPU "
        "reference");
    return;
  }
  if (device == "cpu" && test_perturb_op.empty()) {
    spdlog::info("self-check: not needed on --device cpu (the backend is the CPU reference itself)");
    return;
  }
  const model::SelfCheckReport r = model::self_check(m);
  if (!r.ok()) core::fail("{}", r.error());
  spdlog::info("{}", r.summary());
}

}  // namespace tessera::cli
