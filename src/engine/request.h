// What a caller submits and what it gets back. One Request may hold n samples (SamplingParams::n);
// every output names the sample it belongs to.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/channel.h"
#include "engine/sampling_params.h"

namespace tessera::engine {

struct Request {
  std::string id;  // unique among live requests; used by abort()
  std::vector<int32_t> prompt;
  SamplingParams params;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One generated token with its log-probability and the most likely alternatives (sorted by
// logprob, descending), all from the distribution documented in sampler.h.
struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
  bool forced = false;  // emitted by the budgeted region, not drawn
};

// One event on a request's stream: a new token of sample `index`, and/or that sample's end.
struct RequestOutput {
  int64_t index = 0;
  std::optional<SampledToken> token;
  FinishReason finish = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

// The stream of a request: closed after every sample has finished.
using OutputStream = Channel<RequestOutput>;
using OutputStreamPtr = std::shared_ptr<OutputStream>;

}  // namespace tessera::engine
