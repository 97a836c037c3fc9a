#include "engine/step_pacer.h"

#include <algorithm>
#include <cmath>

namespace tessera::engine {

namespace {
// Weight of the newest step in the decode-step average: recent enough to follow the batch as it
// grows and shrinks, smooth enough that one slow step (a graph recorded, a page allocated) does not
// swing it.
constexpr double kNewest = 0.2;
// Mixed steps the fit looks back over.
constexpr size_t kWindow = 32;

double blend(double average, double sample) {
  return average > 0 ? (1 - kNewest) * average + kNewest * sample : sample;
}
}  // namespace

StepPacer::StepPacer(double stretch, int64_t min_tokens)
    : stretch_(stretch), min_tokens_(std::max<int64_t>(1, min_tokens)) {}

int64_t StepPacer::prefill_cap(int64_t decodes, int64_t backlog) {
  if (stretch_ <= 1.0 || decodes == 0 || decode_s_ <= 0 || token_s_ <= 0) return -1;
  const double room = (stretch_ - 1.0) * decode_s_ - fixed_s_;
  const double tokens = room > 0 ? room / token_s_ : 0.0;
  const int64_t paced = std::max<int64_t>(min_tokens_, static_cast<int64_t>(std::min(tokens, 1e12)));
  const int64_t drain = (std::max<int64_t>(backlog, 0) + kDrainSteps - 1) / kDrainSteps;
  if (backlog > 0) {  // a step with prompt tokens to pace
    ++paced_steps_;
    if (drain > paced) ++widened_steps_;
  }
  return std::max(paced, drain);
}

void StepPacer::observe(int64_t decodes, int64_t prefill, double seconds) {
  if (decodes <= 0 || seconds <= 0) return;  // a prefill-only step says nothing about decodes
  if (prefill == 0) {
    decode_s_ = blend(decode_s_, seconds);
    return;
  }
  if (decode_s_ <= 0) return;
  mixed_.push_back({static_cast<double>(prefill), std::max(0.0, seconds - decode_s_)});
  if (mixed_.size() > kWindow) mixed_.pop_front();
  fit();
}

// Least squares of extra = fixed + per_token x tokens over the window; where the token counts are
// (nearly) all the same the two cannot be told apart, and the whole extra time is charged per token
// (it over-charges larger additions, which errs toward shorter steps). Neither part negative.
void StepPacer::fit() {
  const double n = static_cast<double>(mixed_.size());
  double st = 0, se = 0, stt = 0, ste = 0;
  for (const Mixed& m : mixed_) {
    st += m.tokens;
    se += m.extra_seconds;
    stt += m.tokens * m.tokens;
    ste += m.tokens * m.extra_seconds;
  }
  const double mean_t = st / n, mean_e = se / n;
  const double var_t = stt / n - mean_t * mean_t;
  double slope = -1, intercept = 0;
  if (var_t > 0.01 * mean_t * mean_t) {  // token counts spread by more than 10%
    slope = (ste / n - mean_t * mean_e) / var_t;
    intercept = mean_e - slope * mean_t;
  }
  if (slope <= 0 || intercept < 0) {  // unfit: all per token
    slope = mean_e / mean_t;
    intercept = 0;
  }
  token_s_ = slope;
  fixed_s_ = intercept;
}

}  // namespace tessera::engine
