// tessera generate: greedy or sampled generation from token ids on the CPU reference backend.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "model/sequence_runner.h"

namespace tessera::cli {
namespace {

struct GenerateArgs {
  ModelOptions model;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  uint64_t seed = 0;
  bool json = false;
  bool ignore_eos = false;
  int64_t prefill_chunk = 0;
};

int run(const GenerateArgs& a) {
  auto prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  model::LoadedModel m = model::load_model(a.model.model_dir, a.model.load_options());
  for (int32_t id : prompt)
    if (id >= m.config.vocab_size) core::fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", id, m.config.vocab_size);
  model::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.temperature = a.temperature;
  o.seed = a.seed;
  o.prefill_chunk = a.prefill_chunk;
  if (!a.ignore_eos) o.stop_ids = m.config.eos_token_ids;
  model::GenerateResult r = model::generate(m, prompt, o);
  const double decode_tps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / r.decode_seconds : 0.0;
  if (a.json) {
    nlohmann::json j = {{"prompt_tokens", prompt.size()},
                        {"tokens", r.tokens},
                        {"finish_reason", r.stopped ? "stop" : "length"},
                        {"prefill_seconds", r.prefill_seconds},
                        {"decode_seconds", r.decode_seconds},
                        {"decode_tokens_per_second", decode_tps}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}\n", fmt::join(r.tokens, ","));
    fmt::print(stderr, "prompt {} tokens, prefill {:.3f} s ({:.1f} tok/s); generated {} tokens, decode {:.1f} tok/s; finish: {}\n",
               prompt.size(), r.prefill_seconds, prompt.size() / std::max(r.prefill_seconds, 1e-9), r.tokens.size(),
               decode_tps, r.stopped ? "stop" : "length");
  }
  return 0;
}

CommandRegistration reg{{"generate", "generate token ids from a prompt of token ids (CPU reference backend)",
                         [](CLI::App& app) {
                           auto a = std::make_shared<GenerateArgs>();
                           a->model.add_to(app);
                           app.add_option("--prompt-ids", a->prompt_ids, "comma-separated prompt token ids")->required();
                           app.add_option("--max-tokens", a->max_tokens, "tokens to generate")->capture_default_str()
                               ->check(CLI::NonNegativeNumber);
                           app.add_option("--temperature", a->temperature, "0 = greedy")->capture_default_str()
                               ->check(CLI::NonNegativeNumber);
                           app.add_option("--seed", a->seed, "sampling seed")->capture_default_str();
                           app.add_option("--prefill-chunk", a->prefill_chunk, "prefill in chunks of this many tokens (0 = one step)")
                               ->check(CLI::NonNegativeNumber);
                           app.add_flag("--json", a->json, "print a JSON object");
                           app.add_flag("--ignore-eos", a->ignore_eos, "do not stop at the config's eos_token_id");
                           return [a] { return run(*a); };
                         }}};

}  // namespace
}  // namespace tessera::cli
