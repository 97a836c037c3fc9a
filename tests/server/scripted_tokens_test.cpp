// The engine's test hook behind `tessera_script` (SamplingParams::scripted_tokens): scripted ids
// are emitted in order through the real forward pass, a scripted EOS stops like a drawn one, the
// budgeted region takes precedence, and sampling resumes after the script.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera::engine {
namespace {

using Out = test::EngineRun;

Out run(const Request& r) {
  static model::LoadedModel m = model::load_model(test::fixtures_dir() / "models" / "dsv3-tiny");
  return test::run_engine(m, r, EngineConfig{}, 32);
}

Request request(std::vector<int32_t> script, int64_t max_tokens) {
  Request r;
  r.id = "scripted";
  r.prompt = {5, 6, 7};
  r.params.max_tokens = max_tokens;
  r.params.temperature = 0;
  r.params.eos_token_ids = {1};
  r.params.scripted_tokens = std::move(script);
  return r;
}

TEST(ScriptedTokens, EmittedInOrderThenSamplingResumes) {
  const Out greedy = run(request({}, 6));
  const Out o = run(request({100, 200, 300}, 6));
  ASSERT_EQ(o.tokens.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + 3), (std::vector<int32_t>{100, 200, 300}));
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_NE(o.tokens, greedy.tokens);
}

TEST(ScriptedTokens, ScriptedEosStops) {
  const Out o = run(request({100, 1, 200}, 10));
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{100, 1}));
  EXPECT_EQ(o.finish, FinishReason::kStop);
}

TEST(ScriptedTokens, BudgetedRegionTakesPrecedence) {
  Request r = request({10, 11, 12, 13, 14, 15}, 6);
  r.params.budgeted_region = BudgetedRegion{10, {20}, 2, false};
  const Out o = run(r);
  // <10> opens the region, two tokens inside, then the engine forces the end id.
  ASSERT_GE(o.tokens.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + 4), (std::vector<int32_t>{10, 11, 12, 20}));
}

TEST(ScriptedTokens, IdsOutsideTheVocabularyAreRejected) { EXPECT_THROW(run(request({5000}, 2)), core::Error); }

}  // namespace
}  // namespace tessera::engine
