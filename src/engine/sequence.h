// The engine's state for one sample of a request: its tokens, how many of them have KV in the
// cache, the pages holding that KV, and its sampling state. Owned by the engine, scheduled by the
// scheduler, touched only on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/budgeted_region.h"
#include "engine/sampler.h"

namespace tessera::engine {

struct RequestState;

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  Sequence(RequestState* request, int64_t index, uint64_t order, std::vector<int32_t> prompt, uint64_t seed)
      : request(request),
        index(index),
        order(order),
        tokens(std::move(prompt)),
        prompt_len(static_cast<int64_t>(tokens.size())),
        rng(seed) {}

  RequestState* request;
  int64_t index;                // sample index within the request (n > 1)
  uint64_t order;               // first-come-first-served rank; lower is older
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int64_t prompt_len;
  SeqStatus status = SeqStatus::kWaiting;

  int64_t num_computed = 0;           // tokens whose KV is in the cache
  std::vector<int32_t> block_table;   // pages for tokens [0, num_computed + scheduled)
  std::vector<uint64_t> page_keys;    // prefix-cache keys of the first full pages
  int64_t cached_prompt_tokens = -1;  // from the prefix cache at first admission; -1: not yet
  Sequence* wait_for = nullptr;       // n > 1: wait until this sibling has computed the prompt

  Rng rng;
  BudgetTracker budget;
  std::unique_ptr<TokenConstraint> constraint;  // from SamplingParams::constraint; null: none

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t num_pending() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
};

}  // namespace tessera::engine
