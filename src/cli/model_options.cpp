#include "cli/model_options.h"

#include <charconv>

#include "core/error.h"
#include "ops/backend.h"

namespace tessera::cli {

void ModelOptions::add_to(CLI::App& app, bool model_required) {
  if (model_required)
    app.add_option("--model", model_dir, "checkpoint directory (config.json + safetensors)")->required();
  else
    app.add_option("--model", model_dir, "checkpoint directory; omitted: the built-in demo model (random weights)");
  app.add_option("--device", device, "cpu (fp32 reference), cuda (device 0) or cuda:N")->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_cache_dtype,
                 "KV cache element type: auto (checkpoint hint if supported, else backend default), fp32, bf16, fp8")
      ->capture_default_str();
  app.add_option("--kernels", kernels,
                 "force CUDA kernels: op=kernel[,op=kernel] with mla=auto|wgmma|kv-major|mma|cuda-core, moe=auto|grouped|per-expert "
                 "(default: the registry's choice, or TESSERA_KERNELS)");
  app.add_flag("--enforce-eager", enforce_eager,
               "CUDA: launch every decode step's kernels one by one instead of replaying them as a CUDA graph");
  app.add_option("--latent-norm-eps", latent_norm_eps,
                 "epsilon of the q_a/kv_a latent RMSNorms (default: 1e-6, as the transformers reference)");
}

model::LoadOptions ModelOptions::load_options() const {
  model::LoadOptions o;
  o.device = device;
  o.kv_cache_dtype = kv_cache_dtype;
  o.kernels = kernels;
  o.enforce_eager = enforce_eager;
  if (latent_norm_eps >= 0) o.latent_norm_eps = latent_norm_eps;
  return o;
}

std::unique_ptr<ops::Ops> ModelOptions::make_backend() const {
  return ops::make_backend(device, kernels, enforce_eager);
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size()) break;
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc() || v < 0)
      core::fail("{}: expected comma-separated non-negative token ids, got '{}'", flag, text);
    ids.push_back(v);
    i = static_cast<size_t>(ptr - text.data());
  }
  if (ids.empty()) core::fail("{}: no token ids given", flag);
  return ids;
}

}  // namespace tessera::cli
