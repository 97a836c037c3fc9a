#include "engine/step_pacer.h"

#include <algorithm>

namespace tessera::engine {

namespace {
// Weight of the newest step in the moving averages: recent enough to follow the batch as it grows
// and shrinks, smooth enough that one slow step (a graph recorded, a page allocated) does not swing it.
constexpr double kNewest = 0.2;

double blend(double average, double sample) {
  return average > 0 ? (1 - kNewest) * average + kNewest * sample : sample;
}
}  // namespace

StepPacer::StepPacer(double stretch, int64_t min_tokens)
    : stretch_(stretch), min_tokens_(std::max<int64_t>(1, min_tokens)) {}

int64_t StepPacer::prefill_cap(int64_t decodes) const {
  if (stretch_ <= 1.0 || decodes == 0 || decode_s_ <= 0 || token_s_ <= 0) return -1;
  const double tokens = (stretch_ - 1.0) * decode_s_ / token_s_;
  return std::max<int64_t>(min_tokens_, static_cast<int64_t>(tokens));
}

void StepPacer::observe(int64_t decodes, int64_t prefill, double seconds) {
  if (decodes <= 0 || seconds <= 0) return;  // a prefill-only step says nothing about decodes
  if (prefill == 0) {
    decode_s_ = blend(decode_s_, seconds);
  } else if (decode_s_ > 0) {
    token_s_ = blend(token_s_, std::max(0.0, seconds - decode_s_) / static_cast<double>(prefill));
  }
}

}  // namespace tessera::engine
