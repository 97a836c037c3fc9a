// A gtest suite sharing one fixture checkpoint (shared/fixtures/models/dsv3-tiny) across its tests: loading it is
// what dominates these suites' run time, so it is loaded once per suite rather than once per test.
// Header-only because the model libraries are not linked into tessera_test_support (it needs only the core).
#pragma once

#include <gtest/gtest.h>

#include "model/model.h"
#include "support/test_support.h"

namespace tessera::test {

class Dsv3TinySuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new model::LoadedModel(model::load_model(fixtures_dir() / "models" / "dsv3-tiny"));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static inline model::LoadedModel* model_ = nullptr;
};

}  // namespace tessera::test
