// Test-only fault injection (`tessera serve --test-fail-token ID`, in TESSERA_TEST_HOOKS builds): a model decorator
// whose forward pass throws when a step contains token ID, so tests can drive the engine-failure path (requests
// answered 500, /health 503, the process exiting non-zero) through the real engine.
#pragma once

#include <cstdint>
#include <memory>

#include "model/model.h"

namespace tessera::server {

std::unique_ptr<model::Model> make_failing_model(std::unique_ptr<model::Model> inner, int32_t fail_token);

}  // namespace tessera::server
