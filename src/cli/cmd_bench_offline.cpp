// tessera bench offline: throughput and latency of the engine on random prompts, all submitted up
// front (or `--concurrency` at a time, or arriving as a Poisson process at `--request-rate`). Times
// are taken where a client would see them: when the token is popped from the request's stream.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "cli/command.h"
#include "cli/load_progress.h"
#include "cli/engine_options.h"
#include "cli/model_options.h"
#include "cli/self_check_flags.h"
#include "core/error.h"
#ifdef TESSERA_HAVE_CUDA
#include <optional>

#include "cli/trace_report.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace tessera::cli {
namespace {

struct BenchArgs {
  ModelOptions model;
  EngineOptions engine;
  SelfCheckFlags self_check;
  int64_t num_requests = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t concurrency = 0;  // 0: all at once
  double request_rate = 0;  // requests a second, Poisson arrivals; 0: no pacing
  uint64_t seed = 0;
  bool trace = false;  // the timed run's kernels on the device clock, summed by name, and the time none ran
};

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Live {
  engine::OutputStreamPtr stream;
  Clock::time_point submitted, last;
  bool first = true;
};

int run(const BenchArgs& a) {
  TESSERA_CHECK(a.num_requests > 0 && a.input_len > 0 && a.output_len > 0,
                "bench offline: --num-requests, --input-len and --output-len must be positive");
  TESSERA_CHECK(a.request_rate >= 0, "bench offline: --request-rate {} is negative (0: no pacing)", a.request_rate);
  TESSERA_CHECK(!a.trace || a.model.device == "cuda",
                "bench offline: --trace records CUDA kernels: it needs --device cuda (got {})", a.model.device);
  std::unique_ptr<ops::Ops> backend = a.self_check.wrap(a.model.make_backend());
  const engine::RuntimePlan plan = plan_or_fail(a.model.model_dir, a.model, a.engine, *backend);
  model::LoadedModel m = model::load_model(plan.model, std::move(backend), stderr_load_progress());
  a.self_check.run_or_fail(m, a.model.device);  // before the clock starts: not part of the measurement
  const std::unique_ptr<engine::Engine> built = engine::build_engine(m, plan);
  engine::Engine& eng = *built;

  std::mt19937_64 rng(a.seed);
  const auto vocab = static_cast<uint64_t>(m.config.vocab_size);
  std::vector<engine::Request> requests;
  for (int64_t i = 0; i < a.num_requests; ++i) {
    engine::Request r;
    r.id = fmt::format("bench-{}", i);
    for (int64_t t = 0; t < a.input_len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    r.params.max_tokens = a.output_len;
    r.params.min_tokens = a.output_len;
    r.params.ignore_eos = true;
    r.params.temperature = 1.0f;
    r.params.seed = a.seed + static_cast<uint64_t>(i);
    requests.push_back(std::move(r));
  }
  const size_t concurrency = a.concurrency > 0 ? static_cast<size_t>(a.concurrency) : requests.size();
  // Arrival offsets from the start: exponential gaps of mean 1 / rate (a Poisson process, as
  // vLLM's benchmark_serving), from their own seeded generator so the prompts stay the same.
  std::vector<double> arrival(requests.size(), 0.0);
  if (a.request_rate > 0) {
    std::mt19937_64 gaps(a.seed ^ 0x9e3779b97f4a7c15ull);
    std::exponential_distribution<double> gap(a.request_rate);
    for (size_t i = 1; i < arrival.size(); ++i) arrival[i] = arrival[i - 1] + gap(gaps);
  }

  std::vector<double> ttft, itl, e2e;
  int64_t output_tokens = 0;
  size_t next = 0;
  std::vector<Live> live;
#ifdef TESSERA_HAVE_CUDA
  std::optional<ops::cuda::KernelTrace> trace;
  if (a.trace) trace.emplace();
#endif
  eng.start();
  const auto t0 = Clock::now();
  while (next < requests.size() || !live.empty()) {
    while (live.size() < concurrency && next < requests.size() &&
           std::chrono::duration<double>(Clock::now() - t0).count() >= arrival[next]) {
      Live l;
      l.submitted = Clock::now();
      l.stream = eng.submit(std::move(requests[next++]));
      live.push_back(std::move(l));
    }
    bool any = false;
    for (auto it = live.begin(); it != live.end();) {
      bool done = false;
      while (auto o = it->stream->try_pop()) {
        any = true;
        const auto now = Clock::now();
        if (o->token) {
          ++output_tokens;
          if (it->first)
            ttft.push_back(std::chrono::duration<double>(now - it->submitted).count());
          else
            itl.push_back(std::chrono::duration<double>(now - it->last).count());
          it->first = false;
          it->last = now;
        }
      }
      if (it->stream->closed()) {
        e2e.push_back(std::chrono::duration<double>(Clock::now() - it->submitted).count());
        done = true;
      }
      it = done ? live.erase(it) : it + 1;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  eng.stop();
  const engine::EngineMetrics met = eng.metrics();
  const auto mem = m.model->ops().device_memory();

  fmt::print("model {} | {} requests, input {} tokens, output {} tokens, concurrency {}\n", a.model.model_dir,
             a.num_requests, a.input_len, a.output_len, concurrency);
  if (a.request_rate > 0)
    fmt::print("arrivals: Poisson, {:.2f} requests/s (the last due at {:.3f} s)\n", a.request_rate, arrival.back());
  fmt::print("{}\n", plan.memory.describe());
  fmt::print("total {:.3f} s, {} output tokens\n", seconds, output_tokens);
  fmt::print("requests/s       {:.2f}\n", static_cast<double>(a.num_requests) / seconds);
  fmt::print("output tokens/s  {:.1f}\n", static_cast<double>(output_tokens) / seconds);
  fmt::print("total tokens/s   {:.1f}\n", static_cast<double>(output_tokens + a.num_requests * a.input_len) / seconds);
  auto row = [](const char* name, const std::vector<double>& v) {
    fmt::print("{:<18} p50 {:8.2f} ms  p90 {:8.2f} ms  p99 {:8.2f} ms\n", name, percentile(v, 0.5) * 1e3,
               percentile(v, 0.9) * 1e3, percentile(v, 0.99) * 1e3);
  };
  row("TTFT", ttft);
  row("ITL", itl);
  row("request latency", e2e);
  fmt::print(
      "engine: {} steps ({} paced, {} of them widened for the prompt backlog), {} preemptions, prefix hit rate "
      "{:.1f}%, KV pages in use at the end {}/{} (idle cached {})\n",
      met.steps, met.paced_steps, met.widened_steps, met.preemptions, met.prefix_hit_rate * 100, met.kv_pages_used,
      met.kv_pages_total, met.kv_pages_cached_idle);
  if (const engine::StepTimes& d = met.decode_steps; d.steps > 0) {
    // The device idles before execute and after the tokens: at large batches the host's share of ITL.
    const double k = 1e3 / static_cast<double>(d.steps);
    fmt::print(
        "engine: a decode step (mean of {}): {:.3f} ms before execute (scheduling, the batch), {:.3f} ms in "
        "execute (its host part), {:.3f} ms waiting for the device and the sampled tokens, {:.3f} ms after "
        "(tokens emitted)\n",
        d.steps, d.before_execute_s * k, d.execute_s * k, d.sample_wait_s * k, d.after_s * k);
  }
#ifdef TESSERA_HAVE_CUDA
  // Decode steps as CUDA graphs: a batch size's first step runs eagerly and its second is recorded,
  // so with requests arriving (batch sizes changing) the recordings show how many steps paid for it.
  const ops::cuda::StepGraphStats g = ops::cuda::step_graph_stats(m.model->ops());
  if (g.eager + g.recorded + g.replayed > 0)
    fmt::print(
        "decode graphs (steps without prompt tokens): {} replayed, {} recorded, {} eager (a size's first, or "
        "not capturable), {} replays refused as stale; replay checks {:.1f} ms of host time\n",
        g.replayed, g.recorded, g.eager, g.stale, g.replay_host_seconds * 1e3);
#endif
  if (mem) {
    constexpr double kMiB = 1 << 20;
    const uint64_t used = mem->total_bytes - mem->free_bytes;
    fmt::print(
        "device memory after the run: {:.0f} MiB in use on the device (total - free); this backend's "
        "allocations {:.0f} MiB (resident {:.0f}, activation pool {:.0f}, graphs {:.0f}), the rest {:.0f} MiB "
        "(CUDA context, libraries, other processes)\n",
        used / kMiB, mem->held_bytes / kMiB, mem->resident_bytes / kMiB, mem->activation_bytes / kMiB,
        mem->graph_bytes / kMiB, (static_cast<double>(used) - static_cast<double>(mem->held_bytes)) / kMiB);
    const double measured = static_cast<double>(used), predicted = static_cast<double>(plan.predicted_device_bytes);
    fmt::print("plan predicted {:.0f} MiB on the device ({}); measured {:.0f} MiB, {:+.1f}%\n", predicted / kMiB,
               plan.memory_budget, measured / kMiB, predicted > 0 ? 100 * (measured - predicted) / predicted : 0.0);
  }
#ifdef TESSERA_HAVE_CUDA
  if (trace)
    print_kernel_totals(trace->stop(),
                        fmt::format("kernels of the run ({} engine steps, {} output tokens; CUPTI's recording "
                                    "slows the run a little: take rates from a run without --trace)",
                                    met.steps, output_tokens));
#endif
  return 0;
}

CommandRegistration reg{
    {"offline", "throughput and latency of the engine on random prompts",
     [](CLI::App& app) {
       auto a = std::make_shared<BenchArgs>();
       CLI::App* off = &app;
       a->model.add_to(*off);
       a->engine.add_to(*off);
       a->self_check.add_to(*off);
       off->add_option("--num-requests", a->num_requests, "requests to run")->capture_default_str();
       off->add_option("--input-len", a->input_len, "prompt tokens per request")->capture_default_str();
       off->add_option("--output-len", a->output_len, "generated tokens per request")->capture_default_str();
       off->add_option("--concurrency", a->concurrency, "requests in flight (0 = all)")->capture_default_str();
       off->add_option("--request-rate", a->request_rate,
                       "requests arriving a second as a Poisson process (0 = all at the start); with "
                       "--concurrency, at most that many in flight")
           ->capture_default_str();
       off->add_option("--seed", a->seed, "seed of the random prompts and of sampling")->capture_default_str();
       off->add_flag("--trace", a->trace,
                     "the run's kernels on the device clock, summed by name, and the time no kernel ran between "
                     "them (the host's share of each step; CUDA: loads the toolkit's CUPTI library)");
       return [a] { return run(*a); };
     },
     "bench"}};

}  // namespace
}  // namespace tessera::cli
