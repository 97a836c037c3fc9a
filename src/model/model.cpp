#include "model/model.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "core/error.h"
#include "io/json_file.h"
#include "model/deepseek_v3.h"
#include "model/weight_staging.h"
#include "ops/backend.h"

namespace tessera::model {

ModelPlan resolve_model(const std::filesystem::path& dir, const LoadOptions& options, const ops::Ops& backend) {
  ModelPlan p;
  p.dir = dir;
  const auto config_path = dir / "config.json";
  const nlohmann::json config_json = io::read_json_file(config_path);
  // parse_model_config accepts only the architectures DeepseekV3Model implements (and names them).
  p.config = io::parse_model_config(config_json, config_path.string());
  if (options.latent_norm_eps) {
    p.config.latent_norm_eps = *options.latent_norm_eps;
    p.config.latent_norm_eps_source = "--latent-norm-eps";
  }
  p.quant = io::load_quant_config(dir, config_json);
  p.kv_cache = io::resolve_kv_cache_dtype(options.kv_cache_dtype, p.quant, backend.supported_kv_dtypes(),
                                          backend.default_kv_dtype(), backend.name());
  const auto checkpoint = io::Checkpoint::open(dir);
  p.linears = linear_groups(load_deepseek_v3_weights(*checkpoint, p.config, p.quant));
  p.load_threads = options.load_threads;
  p.device = options.device;
  p.kernels = options.kernels;
  p.enforce_eager = options.enforce_eager;
  return p;
}

LoadedModel load_model(const ModelPlan& plan, std::unique_ptr<ops::Ops> backend, const LoadProgressFn& progress) {
  LoadedModel m;
  m.config = plan.config;
  m.quant = plan.quant;
  m.kv_cache = plan.kv_cache;
  spdlog::info("model: {} ({}), {} layers, hidden {}, {} heads, {} routed experts (top {}), vocab {}",
               m.config.architecture, m.config.model_type, m.config.num_hidden_layers, m.config.hidden_size,
               m.config.num_attention_heads, m.config.n_routed_experts, m.config.num_experts_per_tok,
               m.config.vocab_size);
  spdlog::info("latent-norm epsilon (q_a/kv_a RMSNorm): {:g} from {}; rms_norm_eps: {:g}", m.config.latent_norm_eps,
               m.config.latent_norm_eps_source, m.config.rms_norm_eps);
  if (m.quant.method != io::QuantConfig::Method::kNone)
    spdlog::info("quantization: {} (from {})", m.quant.method_name(), m.quant.source);
  spdlog::info("KV cache dtype: {}: {}", core::kv_cache_dtype_name(m.kv_cache.dtype), m.kv_cache.reason);
  m.checkpoint = io::Checkpoint::open(plan.dir);
  ModelWeights weights = load_deepseek_v3_weights(*m.checkpoint, m.config, m.quant);
  m.kv_scales = kv_cache_scales(weights, m.kv_cache.dtype);
  if (backend->uploads_copy_weights()) {
    WeightStaging staging(*m.checkpoint, weights, *backend, progress, plan.load_threads);
    m.model = std::make_unique<DeepseekV3Model>(m.config, std::move(weights), std::move(backend), &staging);
    staging.finish();
  } else {
    // The backend keeps views of the mapping: the values are read once here, in parallel, to refuse
    // NaN and infinity before anything runs (the staged loader does it as it reads).
    const uint64_t total = m.checkpoint->total_bytes();
    if (progress) progress({0, total, 0.0, false});
    const auto t0 = std::chrono::steady_clock::now();
    check_weights_finite(*m.checkpoint, weights);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.model = std::make_unique<DeepseekV3Model>(m.config, std::move(weights), std::move(backend));
    if (progress) progress({total, total, seconds, true});
  }
  return m;
}

LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options, const LoadProgressFn& progress) {
  std::unique_ptr<ops::Ops> backend = ops::make_backend(options.device, options.kernels, options.enforce_eager);
  const ModelPlan plan = resolve_model(dir, options, *backend);
  return load_model(plan, std::move(backend), progress);
}

}  // namespace tessera::model
