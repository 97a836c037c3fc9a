#include "engine/warmup.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"

namespace tessera::engine {

int64_t warmup_tokens(int64_t requested, bool gpu, const EngineConfig& config) {
  TESSERA_CHECK(requested >= -1, "--warmup-tokens {}: expected -1 (auto), 0 (none) or a prompt length", requested);
  const int64_t wanted = requested == -1 ? (gpu ? config.max_num_batched_tokens : 0) : requested;
  return std::max<int64_t>(0, std::min(wanted, config.max_model_len - 1));
}

double warm_up(Engine& eng, int64_t tokens, int64_t vocab) {
  TESSERA_CHECK(tokens > 0 && vocab > 0, "warm-up: {} tokens of a vocabulary of {}", tokens, vocab);
  Request r;
  r.id = "tessera-warm-up";
  r.prompt.reserve(static_cast<size_t>(tokens));
  // Ids spread over the vocabulary (the embedding rows of a real prompt), not one repeated.
  for (int64_t i = 0; i < tokens; ++i) r.prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  r.params.max_tokens = 1;
  r.params.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  const OutputStreamPtr stream = eng.submit(std::move(r));
  bool token = false;
  while (auto o = stream->pop())
    if (o->token) token = true;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!token) {
    const auto died = eng.loop_failure();
    core::fail(
        "warm-up: a prompt of {} tokens (one full step: --max-num-batched-tokens {}) failed{}{}; lower "
        "--max-num-batched-tokens or --gpu-memory-utilization, or start with --warmup-tokens 0 to find out later",
        tokens, eng.config().max_num_batched_tokens, died ? ": " : " (the engine's error is logged above)",
        died ? *died : "");
  }
  return seconds;
}

}  // namespace tessera::engine
