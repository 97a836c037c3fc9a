#include "model/model.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/json_file.h"
#include "model/deepseek_v3.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tessera::model {

std::unique_ptr<ops::Ops> make_backend(const std::string& device, const std::string& kernels, bool enforce_eager) {
  if (device == "cpu") {
    if (!kernels.empty())
      core::fail("--kernels '{}': kernel choices apply to --device cuda; the cpu backend has one kernel per op",
                 kernels);
    return std::make_unique<ops::cpu::CpuOps>();
  }
  if (device == "cuda") {
#ifdef TESSERA_HAVE_CUDA
    auto ops = ops::cuda::make_cuda_ops(kernels, !enforce_eager);
    spdlog::info("backend: cuda on {}", ops::cuda::device_description());
    return ops;
#else
    core::fail("--device cuda: this build of tessera has no CUDA backend (nvcc was not found at configure time, "
               "or TESSERA_CUDA=OFF); rebuild with the 'release' preset on a machine with the CUDA toolkit");
#endif
  }
  core::fail("--device '{}': expected cpu or cuda", device);
}

LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  LoadedModel m;
  const auto config_path = dir / "config.json";
  const nlohmann::json config_json = io::read_json_file(config_path);
  m.config = io::parse_model_config(config_json, config_path.string());
  if (options.latent_norm_eps) {
    m.config.latent_norm_eps = *options.latent_norm_eps;
    m.config.latent_norm_eps_source = "--latent-norm-eps";
  }
  spdlog::info("model: {} ({}), {} layers, hidden {}, {} heads, {} routed experts (top {}), vocab {}",
               m.config.architecture, m.config.model_type, m.config.num_hidden_layers, m.config.hidden_size,
               m.config.num_attention_heads, m.config.n_routed_experts, m.config.num_experts_per_tok,
               m.config.vocab_size);
  spdlog::info("latent-norm epsilon (q_a/kv_a RMSNorm): {:g} from {}; rms_norm_eps: {:g}", m.config.latent_norm_eps,
               m.config.latent_norm_eps_source, m.config.rms_norm_eps);
  m.quant = io::load_quant_config(dir, config_json);
  if (m.quant.method != io::QuantConfig::Method::kNone)
    spdlog::info("quantization: {} (from {})", m.quant.method_name(), m.quant.source);
  std::unique_ptr<ops::Ops> backend = make_backend(options.device, options.kernels, options.enforce_eager);
  m.kv_cache = io::resolve_kv_cache_dtype(options.kv_cache_dtype, m.quant, backend->supported_kv_dtypes(),
                                          backend->default_kv_dtype(), backend->name());
  spdlog::info("KV cache dtype: {}: {}", io::kv_cache_dtype_name(m.kv_cache.dtype), m.kv_cache.reason);
  m.checkpoint = io::Checkpoint::open(dir);
  if (m.config.architecture != "DeepseekV3ForCausalLM" && m.config.architecture != "KimiK25ForConditionalGeneration")
    core::fail("{}: no model implementation for architecture '{}'", config_path.string(), m.config.architecture);
  ModelWeights weights = load_deepseek_v3_weights(*m.checkpoint, m.config, m.quant);
  if (m.kv_cache.dtype == io::KvCacheDtype::kFp8E4M3) {
    std::vector<std::optional<float>> k, v;
    for (const auto& L : weights.layers) {
      k.push_back(L.attn.k_scale);
      v.push_back(L.attn.v_scale);
    }
    m.kv_scales = fp8_kv_layer_scales(k, v);
  }
  m.model = std::make_unique<DeepseekV3Model>(m.config, std::move(weights), std::move(backend));
  return m;
}

}  // namespace tessera::model
