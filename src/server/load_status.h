// How far the model load is, as the server reports it before it is ready: the "progress" object of
// /health's 503 and the Retry-After of the 503 every other request gets meanwhile. Written by the
// loading thread (through model::LoadProgressFn), read by HTTP threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "model/model.h"
#include "server/response_json.h"

namespace tessera::server {

class LoadStatus {
 public:
  LoadStatus();

  // The loader's latest report.
  void update(const model::LoadProgress& p);

  struct Snapshot {
    uint64_t bytes_done = 0, bytes_total = 0;
    double fraction = 0;  // bytes_done / bytes_total; 0 until the total is known
    double seconds = 0;   // since the load began (this object's creation), frozen once it finished
    bool finished = false;
  };
  Snapshot snapshot() const;

  // {"bytes_done":N,"bytes_total":N,"fraction":F,"seconds":S}
  OJson progress_json() const;

  // Whole seconds a client should wait before trying again: the load's remaining time at its rate
  // so far, within [1, 30]; 5 while there is no rate to go by (nothing read yet).
  int retry_after_seconds() const;

 private:
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  model::LoadProgress last_;
  double finished_seconds_ = 0;
};

}  // namespace tessera::server
