// The engine on the CPU backend with a fixture model: batching, chunked prefill, prefix cache,
// n > 1, preemption, refusal, aborts and the stop / budget rules. The reference for "the right
// tokens" is always the same request run alone on a fresh engine with room to spare.
#include "engine/engine.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>

#include "core/error.h"
#include "model/model.h"
#include "support/model_fixture.h"
#include "support/test_support.h"

namespace tessera::engine {
namespace {

std::vector<int32_t> random_ids(int64_t n, uint64_t seed, int32_t vocab = 1000) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(2 + rng() % static_cast<uint64_t>(vocab - 2));
  return ids;
}

struct Result {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<SampledToken>> sampled;
  std::vector<FinishReason> finish;
  std::vector<int64_t> cached;
};

// Takes what is on the stream now; the request has to be finished for a complete result.
Result drain(OutputStream& s, int64_t n = 1) {
  Result r;
  r.tokens.resize(static_cast<size_t>(n));
  r.sampled.resize(static_cast<size_t>(n));
  r.finish.assign(static_cast<size_t>(n), FinishReason::kNone);
  r.cached.assign(static_cast<size_t>(n), -1);
  while (auto o = s.try_pop()) {
    const auto i = static_cast<size_t>(o->index);
    if (o->token) {
      r.tokens[i].push_back(o->token->token);
      r.sampled[i].push_back(*o->token);
    }
    if (o->finish != FinishReason::kNone) r.finish[i] = o->finish;
    r.cached[i] = o->cached_prompt_tokens;
  }
  return r;
}

class EngineTest : public test::Dsv3TinySuite {
 protected:
  static std::unique_ptr<Engine> make_engine(int64_t pages, EngineConfig config = {}) {
    return std::make_unique<Engine>(*model_->model, model_->make_kv_cache(pages), config);
  }
  static void run_all(Engine& e) {
    int guard = 0;
    while (e.step()) ASSERT_LT(++guard, 100000) << "engine does not finish";
  }
  // The request alone on a fresh, roomy engine.
  static Result alone(const Request& r) {
    auto e = make_engine(64);
    auto s = e->submit(r);
    run_all(*e);
    EXPECT_EQ(e->leak_report(), "");
    return drain(*s, r.params.n);
  }
  static Request sampled_request(std::string id, std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
    Request r;
    r.id = std::move(id);
    r.prompt = std::move(prompt);
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0.9f;
    r.params.seed = seed;
    return r;
  }
};

TEST_F(EngineTest, ChunkedPrefillOfAPromptLongerThanTheStepBudget) {
  const Request r = sampled_request("long", random_ids(200, 1), 8, 3);
  const Result ref = alone(r);
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 48;
  auto e = make_engine(16, cfg);
  auto s = e->submit(r);
  // ceil(200 / 48) = 5 steps of prefill; the first token comes with the last chunk.
  for (int i = 0; i < 4; ++i) {
    e->step();
    EXPECT_FALSE(s->try_pop().has_value()) << "token after prefill chunk " << i + 1;
  }
  e->step();
  auto first = s->try_pop();
  ASSERT_TRUE(first && first->token);
  EXPECT_EQ(e->metrics().prompt_tokens_computed, 200);
  run_all(*e);
  Result got = drain(*s);
  got.tokens[0].insert(got.tokens[0].begin(), first->token->token);
  EXPECT_EQ(got.tokens[0], ref.tokens[0]);
  EXPECT_EQ(got.finish[0], FinishReason::kLength);
  EXPECT_EQ(e->leak_report(), "");
}

// The metrics time the steps without prompt tokens in four parts that add up to no more than the
// run: one prefill step, then max_tokens - 1 decode steps for a request alone.
TEST_F(EngineTest, DecodeStepsAreTimedInFourParts) {
  auto e = make_engine(16);
  auto s = e->submit(sampled_request("timed", random_ids(20, 7), 6, 1));
  const auto start = std::chrono::steady_clock::now();
  run_all(*e);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(drain(*s).tokens[0].size(), 6u);
  const StepTimes d = e->metrics().decode_steps;
  EXPECT_EQ(d.steps, 5);
  for (double part : {d.before_execute_s, d.execute_s, d.sample_wait_s, d.after_s}) EXPECT_GE(part, 0.0);
  EXPECT_GT(d.execute_s, 0.0);  // the CPU backend computes the step inside execute
  EXPECT_LE(d.before_execute_s + d.execute_s + d.sample_wait_s + d.after_s, wall);
  EXPECT_EQ(e->leak_report(), "");
}

TEST_F(EngineTest, PrefixHitsAcrossRequestsAreReported) {
  const auto shared = random_ids(150, 2);
  auto e = make_engine(32);
  auto a = e->submit(sampled_request("a", shared, 4, 1));
  run_all(*e);
  EXPECT_EQ(drain(*a).cached[0], 0);
  // Same first 150 tokens, other tail: the two full pages come from the cache.
  auto prompt_b = shared;
  prompt_b.insert(prompt_b.end(), {7, 8, 9});
  const Request rb = sampled_request("b", prompt_b, 6, 2);
  auto b = e->submit(rb);
  run_all(*e);
  Result got_b = drain(*b);
  EXPECT_EQ(got_b.cached[0], 128);
  EXPECT_EQ(got_b.tokens[0], alone(rb).tokens[0]);
  // A prompt that is exactly two cached pages still computes its last token: one page is a hit.
  auto c = e->submit(sampled_request("c", std::vector<int32_t>(shared.begin(), shared.begin() + 128), 2, 3));
  run_all(*e);
  EXPECT_EQ(drain(*c).cached[0], 64);
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.prefix_hit_tokens, 128 + 64);
  EXPECT_EQ(m.prefix_query_tokens, 150 + 153 + 128);
  EXPECT_EQ(e->leak_report(), "");
}

TEST_F(EngineTest, SamplesOfOneRequestShareThePromptPages) {
  Request r = sampled_request("n3", random_ids(130, 4), 10, 9);
  r.params.n = 3;
  auto e = make_engine(32);
  auto s = e->submit(r);
  e->step();  // sample 0 computes the prompt; its siblings wait for its pages
  e->step();  // siblings admitted with the two full prompt pages from the cache
  EXPECT_EQ(e->page_ref_count(0), 3);
  EXPECT_EQ(e->page_ref_count(1), 3);
  run_all(*e);
  Result got = drain(*s, 3);
  EXPECT_EQ(got.cached, (std::vector<int64_t>{0, 128, 128}));
  const Result ref = alone(r);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.tokens[i].size(), 10u);
    EXPECT_EQ(got.tokens[i], ref.tokens[i]) << "sample " << i;
  }
  EXPECT_NE(got.tokens[0], got.tokens[1]);  // different random streams
  EXPECT_EQ(e->leak_report(), "");
}

TEST_F(EngineTest, PreemptionRecomputesAndEveryRequestGetsItsOwnTokens) {
  // 4 requests of 100 + 100 tokens (4 pages each) on a pool of 8 pages.
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(sampled_request(fmt::format("p{}", i), random_ids(100, 10 + i), 100, 100 + i));
    reqs.back().params.ignore_eos = true;
  }
  auto e = make_engine(8);
  std::vector<OutputStreamPtr> streams;
  for (const auto& r : reqs) streams.push_back(e->submit(r));
  run_all(*e);
  EXPECT_GT(e->metrics().preemptions, 0);
  EXPECT_EQ(e->leak_report(), "");
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result got = drain(*streams[i]);
    EXPECT_EQ(got.finish[0], FinishReason::kLength);
    EXPECT_EQ(got.tokens[0], alone(reqs[i]).tokens[0]) << "request " << i;
  }
}

TEST_F(EngineTest, RequestThatCanNeverFitIsRefusedAtOnce) {
  auto e = make_engine(4);  // 256 tokens
  try {
    e->submit(sampled_request("big", random_ids(200, 5), 100, 1));
    FAIL() << "expected a refusal";
  } catch (const core::Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("300"), std::string::npos) << m;
    EXPECT_NE(m.find("256"), std::string::npos) << m;
  }
  EXPECT_THROW(e->submit(sampled_request("bad", {5000}, 1, 1)), core::Error);  // outside the vocabulary
  EXPECT_FALSE(e->step());
}

TEST_F(EngineTest, AbortFreesPagesAtTheNextStep) {
  auto e = make_engine(16);
  auto a = e->submit(sampled_request("a", random_ids(100, 6), 50, 1));
  auto b = e->submit(sampled_request("b", random_ids(100, 7), 50, 2));
  for (int i = 0; i < 3; ++i) e->step();
  const int64_t used = e->metrics().kv_pages_used;
  EXPECT_EQ(used, 4);
  e->abort("a");
  e->step();
  EXPECT_EQ(e->metrics().kv_pages_used, 2);
  Result got = drain(*a);
  EXPECT_EQ(got.finish[0], FinishReason::kAbort);
  EXPECT_TRUE(a->closed());
  e->abort("b");
  e->step();
  EXPECT_EQ(e->leak_report(), "");
  EXPECT_FALSE(e->step());
}

TEST_F(EngineTest, StopIdsEndWithStopAndMinTokensSuppressesThem) {
  Request r = sampled_request("s", random_ids(20, 8), 12, 4);
  const Result free_run = alone(r);
  const auto& toks = free_run.tokens[0];
  ASSERT_EQ(toks.size(), 12u);
  // The first token that had not appeared before, at index >= 2.
  size_t k = 2;
  while (k < toks.size() &&
         std::find(toks.begin(), toks.begin() + static_cast<long>(k), toks[k]) != toks.begin() + static_cast<long>(k))
    ++k;
  ASSERT_LT(k, toks.size());
  r.params.stop_token_ids = {toks[k]};
  Result stopped = alone(r);
  EXPECT_EQ(stopped.finish[0], FinishReason::kStop);
  EXPECT_EQ(stopped.tokens[0], std::vector<int32_t>(toks.begin(), toks.begin() + static_cast<long>(k) + 1));
  // The same id as EOS: stops too, unless ignore_eos.
  r.params.stop_token_ids.clear();
  r.params.eos_token_ids = {toks[k]};
  EXPECT_EQ(alone(r).finish[0], FinishReason::kStop);
  r.params.ignore_eos = true;
  EXPECT_EQ(alone(r).tokens[0], toks);
  // min_tokens past k: the stop id cannot be drawn at k, so generation goes on past it.
  r.params.ignore_eos = false;
  r.params.min_tokens = static_cast<int64_t>(k) + 2;
  Result min_run = alone(r);
  ASSERT_GE(min_run.tokens[0].size(), k + 2);
  for (size_t i = 0; i < k + 1; ++i) EXPECT_NE(min_run.tokens[0][i], toks[k]) << i;
}

TEST_F(EngineTest, SeedReproducesAndLogprobsAreReported) {
  Request r = sampled_request("seed", random_ids(30, 9), 10, 77);
  r.params.logprobs = 3;
  const Result a = alone(r), b = alone(r);
  EXPECT_EQ(a.tokens[0], b.tokens[0]);
  for (const auto& t : a.sampled[0]) {
    EXPECT_LE(t.logprob, 0.0f);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    EXPECT_GE(t.top[0].logprob, t.logprob);
  }
  r.params.seed = 78;
  EXPECT_NE(alone(r).tokens[0], a.tokens[0]);
}

TEST_F(EngineTest, BudgetedRegionForcesItsEndAfterExactlyTheBudget) {
  auto prompt = random_ids(20, 11);
  prompt.push_back(1000);  // the prompt ends with the region's start token
  Request r = sampled_request("think", prompt, 12, 5);
  r.params.ignore_eos = true;
  const Result free_run = alone(r);
  r.params.budgeted_region = BudgetedRegion{.start_id = 1000, .end_ids = {1001, 1002}, .budget = 6};
  const Result got = alone(r);
  const auto& t = got.tokens[0];
  ASSERT_EQ(t.size(), 12u);
  EXPECT_EQ(std::vector<int32_t>(t.begin(), t.begin() + 6),
            std::vector<int32_t>(free_run.tokens[0].begin(), free_run.tokens[0].begin() + 6));
  EXPECT_EQ(t[6], 1001);
  EXPECT_EQ(t[7], 1002);
  EXPECT_TRUE(got.sampled[0][6].forced);
  EXPECT_FALSE(got.sampled[0][8].forced);
}

TEST_F(EngineTest, ThirtyTwoConcurrentSeededRequestsEqualEachAlone) {
  std::vector<Request> reqs;
  std::mt19937_64 rng(123);
  const auto common = random_ids(64, 999);  // half of them share a first page
  for (int i = 0; i < 32; ++i) {
    auto prompt = random_ids(5 + static_cast<int64_t>(rng() % 70), 500 + i);
    if (i % 2 == 0) prompt.insert(prompt.begin(), common.begin(), common.end());
    Request r = sampled_request(fmt::format("r{}", i), prompt, 12 + static_cast<int64_t>(rng() % 8), 1000 + i);
    if (i % 3 == 0) r.params.top_p = 0.9f;
    if (i % 4 == 0) r.params.top_k = 50;
    if (i % 5 == 0) r.params.frequency_penalty = 0.5f;
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& r : reqs) expected.push_back(alone(r).tokens[0]);

  EngineConfig cfg;
  cfg.max_num_batched_tokens = 256;  // forces chunking across the 32 prompts
  auto e = make_engine(64, cfg);
  e->start();
  std::vector<OutputStreamPtr> streams;
  for (const auto& r : reqs) streams.push_back(e->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> got;
    FinishReason finish = FinishReason::kNone;
    while (auto o = streams[i]->pop()) {
      if (o->token) got.push_back(o->token->token);
      if (o->finish != FinishReason::kNone) finish = o->finish;
    }
    EXPECT_NE(finish, FinishReason::kNone);
    EXPECT_EQ(got, expected[i]) << "request " << i;
  }
  e->stop();
  EXPECT_GT(e->metrics().prefix_hit_tokens, 0);
  EXPECT_EQ(e->leak_report(), "");
}

#if TESSERA_TEST_HOOKS
// An exception escaping a step on the engine thread (here injected where the loop takes requests
// in, outside the forward pass whose failures abort only their step) used to end the process in
// std::terminate. Now the thread ends every request, reports why, and refuses nothing silently.
TEST_F(EngineTest, EngineThreadThatDiesEndsEveryRequestAndTellsTheListener) {
  constexpr int32_t kFault = 777;
  auto e = make_engine(64);
  e->set_test_loop_fault_token(kFault);
  std::mutex m;
  std::vector<std::string> told;
  e->on_loop_failure([&](const std::string& why) {
    std::lock_guard<std::mutex> lock(m);
    told.push_back(why);
  });
  e->start();
  // Running when the thread dies: 4000 tokens are far more than the steps until then.
  Request a = sampled_request("a", random_ids(8, 11), 4000, 1);
  a.params.ignore_eos = true;
  auto sa = e->submit(a);
  auto first = sa->pop_for(std::chrono::seconds(60));
  ASSERT_TRUE(first && first->token) << "no token from a running request";
  ASSERT_FALSE(e->loop_failure().has_value());

  std::vector<int32_t> prompt = random_ids(8, 12);
  prompt[3] = kFault;
  auto sb = e->submit(sampled_request("b", prompt, 4, 2));
  // Both streams end: `a` with kAbort, `b` (taken in when the thread died) likewise or closed.
  auto finish_of = [](OutputStream& s) {
    FinishReason f = FinishReason::kNone;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!s.closed() && std::chrono::steady_clock::now() < deadline)
      if (auto o = s.pop_for(std::chrono::milliseconds(100)); o && o->finish != FinishReason::kNone) f = o->finish;
    EXPECT_TRUE(s.closed()) << "the stream of a request of the dead engine is still open";
    return f;
  };
  EXPECT_EQ(finish_of(*sa), FinishReason::kAbort);
  EXPECT_EQ(finish_of(*sb), FinishReason::kAbort);

  const auto why = e->loop_failure();
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("injected engine-thread failure"), std::string::npos) << *why;
  {
    std::lock_guard<std::mutex> lock(m);
    ASSERT_EQ(told.size(), 1u);
    EXPECT_EQ(told[0], *why);
  }
  // A request after the death ends at once instead of waiting for a loop that no longer runs.
  auto sc = e->submit(sampled_request("c", random_ids(8, 13), 4, 3));
  EXPECT_EQ(finish_of(*sc), FinishReason::kAbort);
  // A listener that comes late is told at once, once.
  int late = 0;
  e->on_loop_failure([&](const std::string&) { ++late; });
  EXPECT_EQ(late, 1);
  e->on_loop_failure(nullptr);
  e->stop();
}
#endif

}  // namespace
}  // namespace tessera::engine
