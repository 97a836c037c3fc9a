// tessera bench prefill: how fast one prompt is prefilled, at several lengths, in tokens/s and in
// model FLOPs against the GPU's measured bf16 GEMM rate (MFU). Each prompt runs alone (one request,
// one output token) with fresh random tokens, so the prefix cache never helps; the time is the
// request's time to its first token as a client would see it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/load_progress.h"
#include "cli/model_options.h"
#include "cli/self_check_flags.h"
#include "core/error.h"
#include "model/model_flops.h"
#ifdef TESSERA_HAVE_CUDA
#include "cli/trace_report.h"
#include "ops/cuda/tools/kernel_bench.h"
#endif

namespace tessera::cli {
namespace {

struct PrefillArgs {
  ModelOptions model;
  EngineOptions engine;
  SelfCheckFlags self_check;
  std::vector<int64_t> prompt_lens = {1024, 4096, 16384, 65536};
  int64_t repeats = 3;
  uint64_t seed = 0;
  bool trace = false;  // one more prompt per length, its kernels on the device clock, summed by name
};

using Clock = std::chrono::steady_clock;

// Seconds from submitting a prompt of `len` random tokens to its first token.
double time_to_first_token(engine::Engine& eng, int64_t len, int64_t vocab, std::mt19937_64& rng,
                           const std::string& id) {
  engine::Request r;
  r.id = id;
  for (int64_t t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
  r.params.max_tokens = 1;
  r.params.ignore_eos = true;
  const auto t0 = Clock::now();
  engine::OutputStreamPtr stream = eng.submit(std::move(r));
  double seconds = -1;
  while (auto o = stream->pop()) {
    if (o->token && seconds < 0) seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  TESSERA_CHECK(seconds >= 0, "bench prefill: the {}-token prompt ended without a token", len);
  return seconds;
}

int run(const PrefillArgs& a) {
  TESSERA_CHECK(!a.prompt_lens.empty(), "bench prefill: --prompt-lens is empty");
  for (int64_t len : a.prompt_lens)
    TESSERA_CHECK(len > 0, "bench prefill: --prompt-lens {}: a prompt needs at least one token", len);
  TESSERA_CHECK(a.repeats > 0, "bench prefill: --repeats {} must be positive", a.repeats);
  TESSERA_CHECK(!a.trace || a.model.device == "cuda",
                "bench prefill: --trace records CUDA kernels: it needs --device cuda (got {})", a.model.device);
  // The GEMM ceiling first, while the GPU holds nothing else.
  double gemm_tflops = 0;
#ifdef TESSERA_HAVE_CUDA
  if (a.model.device == "cuda") gemm_tflops = ops::cuda::measure_gemm_tflops(10);
#endif
  std::unique_ptr<ops::Ops> backend = a.self_check.wrap(a.model.make_backend());
  const engine::RuntimePlan plan = plan_or_fail(a.model.model_dir, a.model, a.engine, *backend);
  const int64_t longest = *std::max_element(a.prompt_lens.begin(), a.prompt_lens.end());
  TESSERA_CHECK(longest + 1 <= plan.engine.max_model_len,
                "bench prefill: --prompt-lens {}: a prompt and its one output token need {} positions, beyond the "
                "{} this plan allows (max_model_len; raise --max-model-len or --kv-cache-bytes)",
                longest, longest + 1, plan.engine.max_model_len);
  model::LoadedModel m = model::load_model(plan.model, std::move(backend), stderr_load_progress());
  a.self_check.run_or_fail(m, a.model.device);
  const std::unique_ptr<engine::Engine> built = engine::build_engine(m, plan);
  engine::Engine& eng = *built;
  const int64_t vocab = m.config.vocab_size;
  std::mt19937_64 rng(a.seed);

  eng.start();
  // Warm-up: one prompt of every length first. The first prompt of a length pays for what its steps
  // allocate and choose the first time (the workspace growing to its activations, cuBLASLt's choice
  // for its shapes): on an H100 the first 8192-token prompt took ~280 ms against ~125 after, which
  // a median of two would have reported.
  std::vector<int64_t> lengths = a.prompt_lens;
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  for (int64_t len : lengths) time_to_first_token(eng, len, vocab, rng, fmt::format("warm-up-{}", len));
  fmt::print(
      "model {} | {} layers | {} tokens a step (--max-num-batched-tokens) | median of {}, after a warm-up "
      "prompt of each length\n",
      a.model.model_dir, m.config.num_hidden_layers, plan.engine.max_num_batched_tokens, a.repeats);
  if (gemm_tflops > 0)
    fmt::print("ceiling: bf16 GEMM 8192^3 {:.0f} TFLOP/s (cuBLASLt, measured before loading)\n", gemm_tflops);
  fmt::print("{:>8} {:>10} {:>12} {:>14} {:>10} {:>10} {:>8}\n", "prompt", "TTFT ms", "tokens/s", "model GFLOP",
             "attn share", "TFLOP/s", "MFU");
  for (int64_t len : a.prompt_lens) {
    std::vector<double> t;
    for (int64_t i = 0; i < a.repeats; ++i)
      t.push_back(time_to_first_token(eng, len, vocab, rng, fmt::format("prefill-{}-{}", len, i)));
    std::sort(t.begin(), t.end());
    const double s = t[t.size() / 2];
    const model::PrefillFlops f = model::prefill_flops(m.config, len);
    const double tflops = f.total() / s / 1e12;
    fmt::print("{:>8} {:>10.1f} {:>12.0f} {:>14.1f} {:>9.1f}% {:>10.1f} {:>8}\n", len, s * 1e3,
               static_cast<double>(len) / s, f.total() / 1e9, 100 * f.attention / f.total(), tflops,
               gemm_tflops > 0 ? fmt::format("{:.1f}%", 100 * tflops / gemm_tflops) : std::string("-"));
  }
#ifdef TESSERA_HAVE_CUDA
  if (a.trace)
    for (int64_t len : a.prompt_lens) {
      ops::cuda::KernelTrace trace;
      const double s = time_to_first_token(eng, len, vocab, rng, fmt::format("prefill-{}-trace", len));
      print_kernel_totals(trace.stop(), fmt::format("kernels of one {}-token prompt (TTFT {:.1f} ms)", len, s * 1e3));
    }
#endif
  eng.stop();
  fmt::print(
      "model FLOPs: 2 per multiply-add of the projections and the experts each token is routed to, causal "
      "attention over the prompt, lm_head for one token (src/model/model_flops.h); MFU = TFLOP/s / the GEMM "
      "ceiling\n");
  return 0;
}

CommandRegistration reg{{"prefill", "prefill speed of one prompt at several lengths: tokens/s, model TFLOP/s and MFU",
                         [](CLI::App& app) {
                           auto a = std::make_shared<PrefillArgs>();
                           a->model.add_to(app);
                           a->engine.add_to(app);
                           a->self_check.add_to(app);
                           app.add_option("--prompt-lens", a->prompt_lens, "prompt lengths in tokens, one row each")
                               ->delimiter(',')
                               ->capture_default_str();
                           app.add_option("--repeats", a->repeats, "prompts timed per length (the median is reported)")
                               ->capture_default_str();
                           app.add_option("--seed", a->seed, "seed of the random prompts")->capture_default_str();
                           app.add_flag("--trace", a->trace,
                                        "after the table, one more prompt of each length with its kernels' device "
                                        "times summed by kernel name, and the time none ran (CUDA: loads the "
                                        "toolkit's CUPTI library)");
                           return [a] { return run(*a); };
                         },
                         "bench"}};

}  // namespace
}  // namespace tessera::cli
