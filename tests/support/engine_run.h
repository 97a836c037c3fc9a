// Runs one request through an engine::Engine on the calling thread (step() until idle) and returns
// what its stream carried: the path the server takes, without HTTP or the engine thread, so tests
// can compare other paths (the CLI, other models) against it. Fails the calling test when the
// engine does not go idle or leaves pages or sequences behind (Engine::leak_report).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/executor.h"
#include "model/model.h"

namespace tessera::test {

struct EngineRun {
  std::vector<int32_t> tokens;
  engine::FinishReason finish = engine::FinishReason::kNone;
};

// Through an engine over `executor` (one device or tensor-parallel ranks).
inline EngineRun run_engine(std::unique_ptr<engine::Executor> executor, engine::Request request,
                            engine::EngineConfig config = {}) {
  engine::Engine e(std::move(executor), config);
  if (request.id.empty()) request.id = "test";
  auto stream = e.submit(std::move(request));
  for (int steps = 0; e.step(); ++steps)
    if (steps >= 100000) {
      ADD_FAILURE() << "run_engine: the engine did not go idle in " << steps << " steps";
      break;
    }
  EngineRun out;
  while (auto o = stream->try_pop()) {
    if (o->token) out.tokens.push_back(o->token->token);
    if (o->finish != engine::FinishReason::kNone) out.finish = o->finish;
  }
  EXPECT_EQ(e.leak_report(), "") << "run_engine: left behind after the request finished";
  return out;
}

// `pages`: the KV pool; the default holds 4096 tokens, more than any fixture request needs.
inline EngineRun run_engine(const model::LoadedModel& m, engine::Request request, engine::EngineConfig config = {},
                            int64_t pages = 64) {
  return run_engine(std::make_unique<engine::LocalExecutor>(*m.model, m.make_kv_cache(pages)), std::move(request),
                    config);
}

// Greedy, never stopping early: `max_tokens` tokens.
inline engine::Request greedy_request(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  engine::Request r;
  r.prompt = prompt;
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace tessera::test
