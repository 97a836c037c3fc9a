#include "server/load_status.h"

#include <algorithm>
#include <cmath>

namespace tessera::server {

LoadStatus::LoadStatus() : start_(std::chrono::steady_clock::now()) {}

void LoadStatus::update(const model::LoadProgress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = p;
  if (p.finished) finished_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

LoadStatus::Snapshot LoadStatus::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Snapshot s;
  s.bytes_done = last_.bytes_done;
  s.bytes_total = last_.bytes_total;
  s.fraction =
      s.bytes_total > 0 ? std::min(1.0, static_cast<double>(s.bytes_done) / static_cast<double>(s.bytes_total)) : 0.0;
  s.finished = last_.finished;
  // Counted here rather than taken from the report: the loader may report seldom (at the start and
  // the end only, today), and "seconds" must keep moving while it is silent.
  s.seconds = last_.finished ? finished_seconds_
                             : std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return s;
}

OJson LoadStatus::progress_json() const {
  const Snapshot s = snapshot();
  // Rounded for people reading the JSON; the byte counts are exact.
  return OJson{{"bytes_done", s.bytes_done},
               {"bytes_total", s.bytes_total},
               {"fraction", std::round(s.fraction * 1e4) / 1e4},
               {"seconds", std::round(s.seconds * 10) / 10}};
}

int LoadStatus::retry_after_seconds() const {
  const Snapshot s = snapshot();
  if (s.fraction <= 0 || s.seconds <= 0) return 5;
  const double remaining = s.seconds * (1 - s.fraction) / s.fraction;
  return static_cast<int>(std::clamp(std::ceil(remaining), 1.0, 30.0));
}

}  // namespace tessera::server
