// The start-up self-check's flags (serve, generate, bench offline) and the one call that runs it
// after loading (model/self_check.h): refuses a backend whose kernels disagree with the CPU
// reference before it serves a token.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"

namespace tessera::cli {

struct SelfCheckFlags {
  bool skip = false;            // --skip-self-check
  std::string test_perturb_op;  // --test-perturb-op (TESSERA_TEST_HOOKS builds only)

  void add_to(CLI::App& app);
  // `backend`, wrapped by the test hook that makes --test-perturb-op's op wrong when it is given.
  std::unique_ptr<ops::Ops> wrap(std::unique_ptr<ops::Ops> backend) const;
  // Runs the self-check on `m`, loaded for --device `device`, and logs its line; throws core::Error
  // with the op, its kernel and the --kernels choice that avoids it when an op disagrees. Skipped
  // with --skip-self-check, and on --device cpu, whose backend is the reference itself (unless a
  // test hook wraps it).
  void run_or_fail(model::LoadedModel& m, const std::string& device) const;
};

}  // namespace tessera::cli
