// A GPU or end-to-end test that cannot run here (no GPU, no CUDA build, no node) skips itself, so
// CI without a GPU passes; on the machine that should run it, TESSERA_REQUIRE_GPU=1 turns that skip
// into a failure, so a suite that silently ran nothing cannot pass there.
#pragma once

#include <gtest/gtest.h>

#include "core/env.h"

namespace tessera::test {

inline bool gpu_required() { return core::env_value("TESSERA_REQUIRE_GPU").value_or("0") != "0"; }

}  // namespace tessera::test

// Skips the test with `reason`, or fails it under TESSERA_REQUIRE_GPU=1. Returns from the function.
#define TESSERA_SKIP_UNLESS_REQUIRED(reason)                                   \
  do {                                                                         \
    if (::tessera::test::gpu_required()) {                                     \
      FAIL() << "TESSERA_REQUIRE_GPU=1, but this test cannot run: " << reason; \
    } else {                                                                   \
      GTEST_SKIP() << reason;                                                  \
    }                                                                          \
  } while (0)
