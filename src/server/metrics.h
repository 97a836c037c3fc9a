// Server-side Prometheus metrics: request latency histograms measured where the client sees them
// (when a token leaves the generation loop), token counters, errors by status, plus the engine's
// own counters (queue depth, running, KV pages, prefix hit rate, preemptions) rendered at scrape time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tessera::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  Histogram ttft, itl, e2e;
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0}, reasoning_tokens{0}, cached_prompt_tokens{0};
  std::atomic<int64_t> requests_finished{0}, requests_aborted{0}, in_flight{0};

  void count_error(int status);
  // `load_fraction`: of the checkpoint bytes loaded (1 once the server is ready).
  std::string render(const engine::EngineMetrics& engine, bool healthy, double load_fraction) const;

 private:
  mutable std::mutex mutex_;
  std::map<int, int64_t> errors_;
};

}  // namespace tessera::server
