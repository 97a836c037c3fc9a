// Constrained decoding in the sampler and the engine (engine/token_constraint.h), with hand-made
// constraints: only allowed tokens are drawn, the constraint sees every emitted token, an inactive
// constraint leaves sampling alone, and a scripted token the constraint refuses is replaced.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera::engine {
namespace {

std::vector<uint32_t> bitmask(int64_t vocab, std::initializer_list<int32_t> ids) {
  std::vector<uint32_t> m(token_bitmask_words(vocab), 0);
  for (int32_t id : ids) m[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  return m;
}

TEST(ConstrainedSampler, GreedyTakesTheBestAllowedToken) {
  const std::vector<float> logits = {5,   4,   3,   2,   1,   0,   -1,  -2,  -3,  -4,  -5,  -6,
                                     -7,  -8,  -9,  -10, -11, -12, -13, -14, -15, -16, -17, -18,
                                     -19, -20, -21, -22, -23, -24, -25, -26, -27, -28, -29, 9};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  const auto allowed = bitmask(36, {3, 33});
  SampleContext ctx;
  ctx.allowed = allowed;
  Rng rng(1);
  const SampledToken t = sample_token(logits, p, ctx, rng);
  EXPECT_EQ(t.token, 3);  // 9 (id 35) and 5 (id 0) are larger but not allowed
  // The distribution is the allowed set's: logits 2 and -28.
  EXPECT_NEAR(t.logprob, -std::log1p(std::exp(-30.0)), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[1].token, 33);
  EXPECT_FALSE(op_can_sample(p, ctx, 36));  // alternatives in the logprobs: the host path
  p.logprobs.reset();
  EXPECT_TRUE(op_can_sample(p, ctx, 36));  // the device path, after Ops::mask_logits
}

TEST(ConstrainedSampler, RandomDrawsStayInsideTheAllowedSet) {
  std::vector<float> logits(100, 0.0f);
  logits[7] = 10;  // the model's favourite, never allowed
  SamplingParams p;
  p.temperature = 1.5f;
  const auto allowed = bitmask(100, {2, 40, 99});
  SampleContext ctx;
  ctx.allowed = allowed;
  Rng rng(7);
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) seen.insert(sample_token(logits, p, ctx, rng).token);
  EXPECT_EQ(seen, (std::set<int32_t>{2, 40, 99}));
}

TEST(ConstrainedSampler, MinTokensCannotEmptyTheAllowedSet) {
  const std::vector<float> logits = {0, 1, 2, 3};
  SamplingParams p;
  p.temperature = 0;
  const auto allowed = bitmask(4, {1});  // e.g. only EOS once the JSON is complete
  const std::vector<int32_t> masked = {1};
  SampleContext ctx;
  ctx.allowed = allowed;
  ctx.masked = masked;
  Rng rng(1);
  EXPECT_EQ(sample_token(logits, p, ctx, rng).token, 1);
  const auto two = bitmask(4, {1, 2});  // with another choice, min_tokens still hides the stop id
  ctx.allowed = two;
  EXPECT_EQ(sample_token(logits, p, ctx, rng).token, 2);
}

// Allows exactly `script` in order, then only `eos`; inactive for the first `free` tokens. Records
// what it was told.
struct ScriptState {
  std::vector<int32_t> seen;
  int fills = 0;
};
class ScriptConstraint final : public TokenConstraint {
 public:
  ScriptConstraint(std::vector<int32_t> script, int32_t eos, size_t free, ScriptState* st)
      : script_(std::move(script)), eos_(eos), free_(free), st_(st) {}
  bool active() const override { return pos_ >= free_; }
  void fill_allowed(std::span<uint32_t> m) override {
    ++st_->fills;
    std::fill(m.begin(), m.end(), 0u);
    const int32_t id = expected();
    m[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  bool advance(int32_t token) override {
    const bool ok = !active() || token == expected();
    ++pos_;
    st_->seen.push_back(token);
    return ok;
  }

 private:
  std::vector<int32_t> script_;
  int32_t eos_;
  int32_t expected() const { return pos_ - free_ < script_.size() ? script_[pos_ - free_] : eos_; }
  size_t free_;
  size_t pos_ = 0;  // tokens emitted by this sample
  ScriptState* st_;
};
class ScriptFactory final : public TokenConstraintFactory {
 public:
  ScriptFactory(std::vector<int32_t> script, size_t free, ScriptState* st)
      : script_(std::move(script)), free_(free), st_(st) {}
  std::unique_ptr<TokenConstraint> create() const override {
    return std::make_unique<ScriptConstraint>(script_, 1, free_, st_);
  }

 private:
  std::vector<int32_t> script_;
  size_t free_;
  ScriptState* st_;
};

using Out = test::EngineRun;

Out run(const Request& r) {
  static model::LoadedModel m = model::load_model(test::fixtures_dir() / "models" / "dsv3-tiny");
  return test::run_engine(m, r, EngineConfig{}, 32);
}

Request request(float temperature, int64_t max_tokens) {
  Request r;
  r.id = "constrained";
  r.prompt = {5, 6, 7};
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.seed = 3;
  r.params.eos_token_ids = {1};
  return r;
}

TEST(ConstrainedEngine, DrawsOnlyWhatTheConstraintAllowsThenStops) {
  for (float temperature : {0.0f, 1.0f}) {
    ScriptState st;
    Request r = request(temperature, 20);
    r.params.constraint = std::make_shared<ScriptFactory>(std::vector<int32_t>{100, 200, 300}, 0, &st);
    const Out o = run(r);
    EXPECT_EQ(o.tokens, (std::vector<int32_t>{100, 200, 300, 1})) << "temperature " << temperature;
    EXPECT_EQ(o.finish, FinishReason::kStop);
    EXPECT_EQ(st.seen, o.tokens);
    EXPECT_EQ(st.fills, 4);
  }
}

TEST(ConstrainedEngine, InactiveConstraintLeavesTheDrawAlone) {
  const Out free_run = run(request(0.0f, 2));
  ScriptState st;
  Request r = request(0.0f, 20);
  r.params.constraint = std::make_shared<ScriptFactory>(std::vector<int32_t>{100}, 2, &st);
  const Out o = run(r);
  ASSERT_EQ(o.tokens.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + 2), free_run.tokens);
  EXPECT_EQ(o.tokens[2], 100);
  EXPECT_EQ(o.tokens[3], 1);
  EXPECT_EQ(st.fills, 2);  // asked only while active
}

TEST(ConstrainedEngine, EachSampleHasItsOwnConstraint) {
  ScriptState st;
  Request r = request(1.0f, 20);
  r.params.n = 3;
  r.params.constraint = std::make_shared<ScriptFactory>(std::vector<int32_t>{100, 200}, 0, &st);
  // The samples' steps interleave; a constraint shared between them would lose its place.
  static model::LoadedModel m = model::load_model(test::fixtures_dir() / "models" / "dsv3-tiny");
  Engine e(*m.model, m.make_kv_cache(32), EngineConfig{});
  auto s = e.submit(r);
  for (int guard = 0; e.step(); ++guard) ASSERT_LT(guard, 10000);
  std::map<int64_t, std::vector<int32_t>> per_sample;
  while (auto x = s->try_pop())
    if (x->token) per_sample[x->index].push_back(x->token->token);
  ASSERT_EQ(per_sample.size(), 3u);
  for (const auto& [i, toks] : per_sample) EXPECT_EQ(toks, (std::vector<int32_t>{100, 200, 1})) << "sample " << i;
}

// Even ids below 512, forever: a wide allowed set, so that the draw has real choices.
class EvenTokens final : public TokenConstraint {
 public:
  bool active() const override { return true; }
  void fill_allowed(std::span<uint32_t> m) override {
    std::fill(m.begin(), m.end(), 0u);
    for (size_t w = 0; w < 16; ++w) m[w] = 0x55555555u;
  }
  bool advance(int32_t token) override { return token % 2 == 0 && token < 512; }
};
class EvenFactory final : public TokenConstraintFactory {
 public:
  std::unique_ptr<TokenConstraint> create() const override { return std::make_unique<EvenTokens>(); }
};

TEST(ConstrainedEngine, DevicePathAndHostPathDrawTheSameTokens) {
  // No logprob alternatives: the op path (Ops::mask_logits then Ops::sample); top-1 alternatives
  // send the row through the host sampler. Same seed, same tokens.
  for (float temperature : {0.0f, 0.8f}) {
    Request r = request(temperature, 12);
    r.params.constraint = std::make_shared<EvenFactory>();
    const Out device = run(r);
    r.params.logprobs = 1;
    const Out host = run(r);
    ASSERT_EQ(device.tokens.size(), 12u);
    EXPECT_EQ(device.tokens, host.tokens) << "temperature " << temperature;
    for (int32_t t : device.tokens) EXPECT_TRUE(t % 2 == 0 && t < 512) << t;
  }
}

#if TESSERA_TEST_HOOKS
TEST(ConstrainedEngine, ScriptedTokensTheConstraintRefusesAreReplaced) {
  ScriptState st;
  Request r = request(0.0f, 20);
  r.params.scripted_tokens = {100, 7, 300};  // 7 is refused: the constrained draw gives 200
  r.params.constraint = std::make_shared<ScriptFactory>(std::vector<int32_t>{100, 200, 300}, 0, &st);
  const Out o = run(r);
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{100, 200, 300, 1}));
}
#endif

}  // namespace
}  // namespace tessera::engine
