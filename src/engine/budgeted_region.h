// The state machine of a token-budgeted region (SamplingParams::budgeted_region): it watches the
// tokens of a sample and says which token must be forced next, if any.
#pragma once

#include <cstdint>
#include <span>

#include "engine/sampling_params.h"

namespace tessera::engine {

class BudgetTracker {
 public:
  BudgetTracker() = default;
  // Scans the prompt to learn whether the region is already open.
  BudgetTracker(const BudgetedRegion& region, std::span<const int32_t> prompt);

  // The token to emit instead of drawing one, or -1.
  int32_t forced_token() const;
  // Feeds one generated token (drawn or forced).
  void observe(int32_t token);
  bool open() const { return open_; }
  int64_t used() const { return used_; }

 private:
  void feed(int32_t token, bool count);
  const BudgetedRegion* region_ = nullptr;
  bool open_ = false;
  int64_t used_ = 0;    // generated tokens inside the open region
  size_t matched_ = 0;  // length of the end sequence matched so far
  size_t forcing_ = 0;  // next index of end_ids to force; 0 when not forcing
  bool forcing_active_ = false;
};

}  // namespace tessera::engine
