#include "server/metrics.h"

#include <fmt/format.h>

namespace tessera::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mutex_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum_, name, count_);
}

ServerMetrics::ServerMetrics()
    : ttft({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      e2e({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void ServerMetrics::count_error(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++errors_[status];
}

std::string ServerMetrics::render(const engine::EngineMetrics& e, bool healthy, double load_fraction) const {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  gauge("tessera_healthy", "1 while the engine loop is alive and the server accepts requests", healthy ? 1 : 0);
  gauge("tessera_model_load_fraction", "fraction of the checkpoint bytes loaded (1 once the server is ready)",
        load_fraction);
  gauge("tessera_requests_waiting", "requests queued in the engine (queue depth)", static_cast<double>(e.waiting));
  gauge("tessera_requests_running", "sequences running in the engine", static_cast<double>(e.running));
  gauge("tessera_requests_in_flight", "HTTP generation requests admitted and not yet answered",
        static_cast<double>(in_flight.load()));
  gauge("tessera_kv_pages_used", "KV cache pages referenced by sequences", static_cast<double>(e.kv_pages_used));
  gauge("tessera_kv_pages_cached_idle", "KV cache pages kept only for prefix reuse",
        static_cast<double>(e.kv_pages_cached_idle));
  gauge("tessera_kv_pages_total", "KV cache pages in the pool", static_cast<double>(e.kv_pages_total));
  gauge("tessera_kv_cache_usage_ratio", "fraction of KV pages referenced by sequences",
        e.kv_pages_total > 0 ? static_cast<double>(e.kv_pages_used) / static_cast<double>(e.kv_pages_total) : 0.0);
  gauge("tessera_prefix_cache_hit_rate", "prompt tokens served from the prefix cache / prompt tokens looked up",
        e.prefix_hit_rate);
  counter("tessera_preemptions_total", "sequences preempted for KV space", static_cast<double>(e.preemptions));
  counter("tessera_paced_steps_total", "steps whose prefill beside decodes the step pacer capped",
          static_cast<double>(e.paced_steps));
  counter("tessera_paced_steps_widened_total", "paced steps widened to a share of the prompt backlog",
          static_cast<double>(e.widened_steps));
  counter("tessera_prompt_tokens_total", "prompt tokens of finished requests",
          static_cast<double>(prompt_tokens.load()));
  counter("tessera_prompt_tokens_cached_total", "prompt tokens whose KV came from the prefix cache",
          static_cast<double>(cached_prompt_tokens.load()));
  counter("tessera_generation_tokens_total", "generated tokens (reasoning included)",
          static_cast<double>(generation_tokens.load()));
  counter("tessera_reasoning_tokens_total", "generated tokens inside reasoning",
          static_cast<double>(reasoning_tokens.load()));
  counter("tessera_requests_finished_total", "generation requests that ended (completed or aborted)",
          static_cast<double>(requests_finished.load()));
  counter("tessera_requests_aborted_total", "generation requests aborted (client gone, shutdown)",
          static_cast<double>(requests_aborted.load()));
  out +=
      "# HELP tessera_request_errors_total error responses by HTTP status\n# TYPE tessera_request_errors_total "
      "counter\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [status, n] : errors_)
      out += fmt::format("tessera_request_errors_total{{status=\"{}\"}} {}\n", status, n);
  }
  ttft.render(out, "tessera_time_to_first_token_seconds", "time from admission to the first generated token");
  itl.render(out, "tessera_inter_token_latency_seconds", "time between consecutive tokens of a choice");
  e2e.render(out, "tessera_request_latency_seconds", "time from admission to the last token");
  return out;
}

}  // namespace tessera::server
