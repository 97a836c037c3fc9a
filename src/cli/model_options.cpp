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
                 "force CUDA kernels: op=kernel[,op=kernel] with mla=auto|wgmma|kv-major|mma|cuda-core, "
                 "moe=auto|grouped|per-expert "
                 "(default: the registry's choice, or TESSERA_KERNELS)");
  app.add_flag("--enforce-eager", enforce_eager,
               "CUDA: launch every decode step's kernels one by one instead of replaying them as a CUDA graph");
  app.add_option("--latent-norm-eps", latent_norm_eps,
                 "epsilon of the q_a/kv_a latent RMSNorms (default: 1e-6, as the transformers reference)")
      ->check(CLI::PositiveNumber);
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

std::vector<std::string> split_list_items(const std::string& text, const std::string& flag) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  if (e - b >= 2 && text[b] == '[' && text[e - 1] == ']') {
    ++b;
    --e;
  }
  std::vector<std::string> items;
  if (b == e) return items;
  const std::string body = text.substr(b, e - b);
  size_t start = 0, index = 0;
  for (;;) {
    const size_t comma = body.find(',', start);
    const std::string segment = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    ++index;
    // Within a comma-separated item, spaces separate items too ("1 2 3").
    size_t added = 0;
    for (size_t p = 0; p < segment.size();) {
      while (p < segment.size() && is_space(segment[p])) ++p;
      size_t q = p;
      while (q < segment.size() && !is_space(segment[q])) ++q;
      if (q > p) {
        items.push_back(segment.substr(p, q - p));
        ++added;
      }
      p = q;
    }
    if (added == 0)
      core::fail("{}: item {} of '{}' is empty (a leading, trailing or doubled comma?)", flag, index, text);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  for (const std::string& item : split_list_items(text, flag)) {
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || ptr != item.data() + item.size() || v < 0)
      core::fail("{}: '{}' is not a token id (expected comma-separated non-negative integers below 2^31)", flag, item);
    ids.push_back(v);
  }
  if (ids.empty()) core::fail("{}: no token ids given", flag);
  return ids;
}

}  // namespace tessera::cli
