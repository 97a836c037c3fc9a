// tessera logits: the fp32 logits of every prompt position, written as safetensors tensor `logits`.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/sequence_runner.h"

namespace tessera::cli {
namespace {

struct LogitsArgs {
  ModelOptions model;
  std::string prompt_ids;
  std::string out;
};

int run(const LogitsArgs& a) {
  auto prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  model::LoadedModel m = model::load_model(a.model.model_dir, a.model.load_options());
  for (int32_t id : prompt)
    if (id >= m.config.vocab_size)
      core::fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", id, m.config.vocab_size);
  std::vector<float> logits = model::prompt_logits(m, prompt);
  const int64_t T = static_cast<int64_t>(prompt.size());
  io::write_safetensors(
      a.out, {io::f32_tensor("logits", {T, m.config.vocab_size}, logits), io::i32_tensor("prompt", {T}, prompt)},
      {{"producer", "tessera logits (cpu fp32 reference)"}});
  fmt::print(stderr, "wrote logits [{}, {}] to {}\n", T, m.config.vocab_size, a.out);
  return 0;
}

CommandRegistration reg{
    {"logits", "write the fp32 logits of every prompt position to a safetensors file", [](CLI::App& app) {
       auto a = std::make_shared<LogitsArgs>();
       a->model.add_to(app);
       app.add_option("--prompt-ids", a->prompt_ids, "comma-separated prompt token ids")->required();
       app.add_option("--out", a->out, "output .safetensors file (tensor 'logits' [T, vocab])")->required();
       return [a] { return run(*a); };
     }}};

}  // namespace
}  // namespace tessera::cli
