// Test-only fault injection (TESSERA_TEST_HOOKS builds; `--test-perturb-op OP`): a backend
// decorator whose op OP returns a wrong result, the output added to itself (a relative error of 1),
// so that tests can show the start-up self-check refusing a backend with a wrong kernel and naming
// the op, on any backend (the CPU one in CI). Every other op, and OP's inputs, are the wrapped
// backend's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/forwarding_ops.h"

namespace tessera::ops {

// The ops that can be perturbed: each Ops virtual with a float output tensor.
const std::vector<std::string>& perturbable_ops();

// `inner` with op `op` perturbed ("none": nothing changed, only wrapped); throws core::Error naming
// the flag and the ops it takes for any other name.
std::unique_ptr<Ops> make_perturbed_ops(std::unique_ptr<Ops> inner, const std::string& op);

}  // namespace tessera::ops
