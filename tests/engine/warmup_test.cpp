// serve's start-up warm-up (engine/warmup.h) on the CPU backend with a fixture model: its length by
// default and when asked, the prompt run through a started engine that serves normally afterwards,
// and a failed warm-up named with the flags to change.
#include "engine/warmup.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "support/model_fixture.h"

namespace tessera::engine {
namespace {

// A full step on a GPU by default, none on the CPU, what is asked otherwise; never more than a
// sequence holds with its one token.
TEST(WarmupTokens, AFullStepOnAGpuByDefaultNoneOnTheCpuCappedByTheModelLength) {
  EngineConfig c;
  c.max_num_batched_tokens = 2048;
  c.max_model_len = 4096;
  EXPECT_EQ(warmup_tokens(-1, true, c), 2048);
  EXPECT_EQ(warmup_tokens(-1, false, c), 0);
  EXPECT_EQ(warmup_tokens(0, true, c), 0);
  EXPECT_EQ(warmup_tokens(100, false, c), 100);
  c.max_model_len = 1000;
  EXPECT_EQ(warmup_tokens(-1, true, c), 999);
  EXPECT_EQ(warmup_tokens(5000, false, c), 999);
  try {
    (void)warmup_tokens(-2, true, c);
    ADD_FAILURE() << "--warmup-tokens -2 was taken";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--warmup-tokens -2"), std::string::npos) << e.what();
  }
}

class WarmupTest : public test::Dsv3TinySuite {
 protected:
  static std::unique_ptr<Engine> make_engine(EngineConfig config = {}) {
    return std::make_unique<Engine>(*model_->model, model_->make_kv_cache(64), config);
  }
  static Request greedy(std::vector<int32_t> prompt) {
    Request r;
    r.id = "after";
    r.prompt = std::move(prompt);
    r.params.max_tokens = 6;
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    return r;
  }
  static std::vector<int32_t> tokens_of(Engine& e, const Request& r) {
    std::vector<int32_t> got;
    auto s = e.submit(r);
    while (auto o = s->pop())
      if (o->token) got.push_back(o->token->token);
    return got;
  }
};

// The warm-up runs its prompt in chunks of a step and returns; the engine then answers a request
// with the tokens a fresh engine gives it (the warm-up left no state behind but idle cached pages).
TEST_F(WarmupTest, RunsOnePromptThenTheEngineServesAsAFreshOne) {
  const Request after = greedy({5, 17, 99, 3, 250, 41});
  auto fresh = make_engine();
  fresh->start();
  const std::vector<int32_t> want = tokens_of(*fresh, after);
  fresh->stop();
  ASSERT_EQ(want.size(), 6u);

  EngineConfig c;
  c.max_num_batched_tokens = 64;  // the 150-token warm-up takes three steps
  auto e = make_engine(c);
  e->start();
  const double seconds = warm_up(*e, 150, model_->config.vocab_size);
  EXPECT_GT(seconds, 0.0);
  // Three steps ran; the metrics of the last may land just after its token, those of the first two
  // are in.
  EXPECT_GE(e->metrics().steps, 2);
  EXPECT_EQ(tokens_of(*e, after), want);
  e->stop();
  EXPECT_EQ(e->leak_report(), "");
}

#if TESSERA_TEST_HOOKS
// A warm-up whose step fails ends start-up with a message naming its length and what to change.
TEST_F(WarmupTest, AFailedWarmUpNamesItsLengthAndTheFlags) {
  auto e = make_engine();
  e->set_test_loop_fault_token(13);  // the warm-up prompt's first id: (0 * 7919 + 13) % vocab
  e->start();
  try {
    (void)warm_up(*e, 40, model_->config.vocab_size);
    ADD_FAILURE() << "the warm-up did not fail";
  } catch (const core::Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("warm-up: a prompt of 40 tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("--warmup-tokens 0"), std::string::npos) << what;
    EXPECT_NE(what.find("injected engine-thread failure"), std::string::npos) << what;
  }
  e->stop();
}
#endif

}  // namespace
}  // namespace tessera::engine
