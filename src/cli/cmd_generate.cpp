// tessera generate: greedy or sampled generation from token ids through the engine, so that a seed
// gives the tokens the server gives for the same prompt and sampling settings.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "cli/load_progress.h"
#include "cli/model_options.h"
#include "cli/self_check_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/runtime_plan.h"

namespace tessera::cli {
namespace {

struct GenerateArgs {
  ModelOptions model;
  SelfCheckFlags self_check;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  uint64_t seed = 0;
  bool json = false;
  bool ignore_eos = false;
  int64_t prefill_chunk = 0;
  int tensor_parallel_size = 1;            // ranks as threads (CPU backend, or a GPU each)
  std::string kv_cache_sharding = "auto";  // as for serve
  std::string kv_cache_bytes;              // as for serve; empty: the GPU budget or the CPU default
  double gpu_memory_utilization = 0.9;     // as for serve
};

using Clock = std::chrono::steady_clock;

struct Generated {
  std::vector<int32_t> tokens;
  engine::FinishReason finish = engine::FinishReason::kLength;  // --max-tokens 0 ends at once
  double prefill_seconds = 0;  // submit to the first token: the prefill step(s) and the first draw
  double decode_seconds = 0;   // first token to last: one decode step per further token
};

// The engine settings of one request: one sequence a step whose budget is its prefill chunk (a
// decode needs one token of it), so --prefill-chunk is max_num_batched_tokens and 0 lets the whole
// prompt go in one step; no prefix caching (nothing to share); the KV pool and memory flags as for
// serve, resolved by the same plan (a seeded request draws the same tokens whatever the pool).
engine::EngineSettings settings_for(const GenerateArgs& a, int64_t prompt_tokens, int64_t total_tokens) {
  engine::EngineSettings s;
  s.kv_cache_bytes = a.kv_cache_bytes;
  s.max_model_len = std::to_string(total_tokens);
  s.max_num_batched_tokens = a.prefill_chunk > 0 ? a.prefill_chunk : std::max<int64_t>(prompt_tokens, 1);
  s.max_num_seqs = 1;
  s.prefix_caching = false;
  s.gpu_memory_utilization = a.gpu_memory_utilization;
  s.tensor_parallel_size = a.tensor_parallel_size;
  s.kv_cache_sharding = a.kv_cache_sharding;
  return s;
}

Generated run_engine(engine::Engine& eng, const io::ModelConfig& config, const std::vector<int32_t>& prompt,
                     const GenerateArgs& a) {
  engine::Request r;
  r.id = "generate";
  r.prompt = prompt;
  r.params.max_tokens = a.max_tokens;
  r.params.temperature = a.temperature;
  r.params.seed = a.seed;
  r.params.eos_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  r.params.ignore_eos = a.ignore_eos;

  Generated g;
  g.finish = engine::FinishReason::kNone;
  const auto t0 = Clock::now();
  Clock::time_point first = t0, last = t0;
  engine::OutputStreamPtr stream = eng.submit(std::move(r));
  // Stepped on this thread rather than by start(): a single request needs no engine thread, and the
  // time each token is popped is the time its step ended.
  for (bool more = true; more;) {
    more = eng.step();
    while (auto o = stream->try_pop()) {
      if (o->token) {
        last = Clock::now();
        if (g.tokens.empty()) first = last;
        g.tokens.push_back(o->token->token);
      }
      if (o->finish != engine::FinishReason::kNone) g.finish = o->finish;
    }
  }
  // The engine logs a failed step and aborts its requests rather than throwing.
  if (g.finish == engine::FinishReason::kAbort)
    core::fail("generate: the engine step failed (the error is logged above)");
  TESSERA_CHECK(g.finish != engine::FinishReason::kNone, "generate: the engine went idle before the request finished");
  g.prefill_seconds = std::chrono::duration<double>(first - t0).count();
  g.decode_seconds = std::chrono::duration<double>(last - first).count();
  return g;
}

int run(const GenerateArgs& a) {
  auto prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  const int64_t total = static_cast<int64_t>(prompt.size()) + a.max_tokens;
  std::unique_ptr<ops::Ops> backend = a.self_check.wrap(a.model.make_backend());
  // The plan `tessera plan` prints for these settings (max context = prompt + --max-tokens): refused
  // before any weight is read when it cannot run, e.g. a sequence longer than the model allows or a
  // KV pool too small for it (--kv-cache-bytes).
  const engine::RuntimePlan plan = [&] {
    try {
      return plan_or_fail(a.model.model_dir, a.model, settings_for(a, static_cast<int64_t>(prompt.size()), total),
                          *backend);
    } catch (const core::Error& e) {
      // Its --max-model-len is the prompt + --max-tokens: say so.
      core::fail("generate: the prompt ({} tokens) + --max-tokens {} = {} tokens (the plan's --max-model-len): {}",
                 prompt.size(), a.max_tokens, total, e.what());
    }
  }();
  for (int32_t id : prompt)
    if (id < 0 || id >= plan.model.config.vocab_size)
      core::fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", id, plan.model.config.vocab_size);
  // The engine refuses max_tokens 0; the command has always answered it with no tokens.
  Generated r;
  if (plan.tensor_parallel_size > 1) {
    // (A size that does not divide the heads was refused by the plan, before any weight was read.)
    backend.reset();  // each rank makes its own
    model::LoadedRanks ranks = model::load_model_ranks_for(plan.model, plan.tensor_parallel_size);
    if (a.max_tokens > 0) r = run_engine(*engine::build_engine(ranks, plan), plan.model.config, prompt, a);
  } else {
    model::LoadedModel m = model::load_model(plan.model, std::move(backend), stderr_load_progress());
    a.self_check.run_or_fail(m, a.model.device);
    if (a.max_tokens > 0) {
      std::unique_ptr<engine::Engine> eng = engine::build_engine(m, plan);
      r = run_engine(*eng, m.config, prompt, a);
    }
  }
  const char* finish = engine::finish_reason_name(r.finish);
  const double decode_tps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / std::max(r.decode_seconds, 1e-9) : 0.0;
  if (a.json) {
    nlohmann::json j = {{"prompt_tokens", prompt.size()},
                        {"tokens", r.tokens},
                        {"finish_reason", finish},
                        {"prefill_seconds", r.prefill_seconds},
                        {"decode_seconds", r.decode_seconds},
                        {"decode_tokens_per_second", decode_tps}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}\n", fmt::join(r.tokens, ","));
    fmt::print(stderr,
               "prompt {} tokens, prefill {:.3f} s ({:.1f} tok/s); generated {} tokens, decode {:.1f} tok/s; "
               "finish: {}\n",
               prompt.size(), r.prefill_seconds, prompt.size() / std::max(r.prefill_seconds, 1e-9), r.tokens.size(),
               decode_tps, finish);
  }
  return 0;
}

CommandRegistration reg{
    {"generate", "generate token ids from a prompt of token ids through the engine (on --device)", [](CLI::App& app) {
       auto a = std::make_shared<GenerateArgs>();
       a->model.add_to(app);
       a->self_check.add_to(app);
       app.add_option("--prompt-ids", a->prompt_ids, "comma-separated prompt token ids")->required();
       app.add_option("--max-tokens", a->max_tokens, "tokens to generate")
           ->capture_default_str()
           ->check(CLI::NonNegativeNumber);
       app.add_option("--temperature", a->temperature, "0 = greedy")
           ->capture_default_str()
           ->check(CLI::NonNegativeNumber);
       app.add_option("--seed", a->seed, "sampling seed (the API's `seed`: same seed, same tokens)")
           ->capture_default_str();
       app.add_option("--prefill-chunk", a->prefill_chunk,
                      "prefill in chunks of this many tokens: the engine's tokens per step "
                      "(0 = the whole prompt in one step)")
           ->check(CLI::NonNegativeNumber);
       add_tensor_parallel_option(app, a->tensor_parallel_size, a->kv_cache_sharding);
       app.add_option("--kv-cache-bytes", a->kv_cache_bytes,
                      "KV cache pool size, as for serve (default: the GPU budget, or 256MiB on "
                      "CPU); it must hold the prompt + --max-tokens");
       app.add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                      "GPU backends: fraction of the device's memory the whole process may use, "
                      "as for serve")
           ->capture_default_str()
           ->check(CLI::Range(0.01, 1.0));
       app.add_flag("--json", a->json, "print a JSON object");
       app.add_flag("--ignore-eos", a->ignore_eos, "do not stop at the config's eos_token_id");
       return [a] { return run(*a); };
     }}};

}  // namespace
}  // namespace tessera::cli
