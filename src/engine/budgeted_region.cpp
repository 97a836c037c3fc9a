#include "engine/budgeted_region.h"

namespace tessera::engine {

BudgetTracker::BudgetTracker(const BudgetedRegion& region, std::span<const int32_t> prompt) : region_(&region) {
  for (int32_t t : prompt) feed(t, /*count=*/false);
  if (region.starts_open) open_ = true;
}

void BudgetTracker::feed(int32_t token, bool count) {
  const auto& end = region_->end_ids;
  if (!open_) {
    if (token == region_->start_id && region_->start_id >= 0) {
      open_ = true;
      used_ = 0;
      matched_ = 0;
    }
    return;
  }
  if (count) ++used_;
  // Track the longest prefix of `end` that the recent tokens end with (restart on mismatch; the
  // end sequences in practice have no self-overlap worth a KMP table).
  if (!end.empty() && token == end[matched_]) {
    ++matched_;
  } else {
    matched_ = (!end.empty() && token == end[0]) ? 1 : 0;
  }
  if (!end.empty() && matched_ == end.size()) {
    open_ = false;
    matched_ = 0;
  }
}

int32_t BudgetTracker::forced_token() const {
  if (region_ == nullptr || !open_ || region_->end_ids.empty()) return -1;
  if (forcing_active_) return region_->end_ids[forcing_];
  // Completes a partially generated end sequence rather than starting it over.
  if (used_ >= region_->budget) return region_->end_ids[matched_];
  return -1;
}

void BudgetTracker::observe(int32_t token) {
  if (region_ == nullptr) return;
  const bool was_forcing = forced_token() >= 0;
  if (was_forcing) {
    if (!forcing_active_) forcing_ = matched_;
    forcing_active_ = true;
    ++forcing_;
    // Forced tokens are the end sequence itself: they close the region, and are not counted
    // against the budget (it was spent already).
    if (forcing_ == region_->end_ids.size()) {
      forcing_active_ = false;
      forcing_ = 0;
      open_ = false;
      matched_ = 0;
      used_ = 0;
    }
    return;
  }
  feed(token, /*count=*/true);
}

}  // namespace tessera::engine
