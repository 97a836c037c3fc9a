// A loaded language model behind the forward interface (DESIGN.md "The model forward"), and the
// loader that resolves configuration once: architecture, quantization, KV-cache dtype.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "model/kv_cache.h"
#include "model/step_batch.h"
#include "ops/comm/collective_choice.h"
#include "ops/ops.h"

namespace tessera::model {

class Model {
 public:
  virtual ~Model() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual ops::Ops& ops() = 0;
  // Runs one step: writes the new tokens' latents into `cache` and returns logits
  // [batch.num_logits_rows(), vocab] as a backend tensor (fp32 on CPU).
  virtual core::Tensor forward(const StepBatch& batch, KvCache& cache) = 0;
  // Parameter count and stored bytes of the weights the forward uses.
  virtual uint64_t parameter_count() const = 0;
  virtual uint64_t weight_bytes() const = 0;
};

struct LoadOptions {
  std::string device = "cpu";             // --device: cpu (the fp32 reference) or cuda
  std::string kv_cache_dtype = "auto";    // --kv-cache-dtype
  std::string kernels;                    // --kernels: forced CUDA kernels, "op=kernel,..."
  bool enforce_eager = false;             // --enforce-eager: no CUDA graphs for decode steps
  std::optional<double> latent_norm_eps;  // override of the q_a/kv_a RMSNorm epsilon
  int load_threads = 0;                   // reader threads of the staged loader; 0: one per core, at most 16
};

// The model's part of the start-up plan, resolved once from the checkpoint's config files (no weight
// is read), with where each value came from: the config (and the --latent-norm-eps override), the
// quantization, and the KV-cache dtype for the backend it will run on.
struct ModelPlan {
  std::filesystem::path dir;
  io::ModelConfig config;
  io::QuantConfig quant;
  io::KvCacheDtypeResolution kv_cache;
  // The linears by group and checkpoint format, from the safetensors headers (validated, no data
  // read): what the backend's plan counts device bytes from.
  std::vector<ops::WeightGroup> linears;
  int load_threads = 0;  // LoadOptions::load_threads
  // The backend it runs on (LoadOptions' device, kernels and enforce_eager): tensor-parallel ranks
  // make one each (load_model_ranks).
  std::string device = "cpu", kernels;
  bool enforce_eager = false;
  // Tensor-parallel ranks on a GPU each: which collectives go one-shot over peer memory and which
  // to NCCL, measured when the plan was made (engine::resolve_plan); none: measured at load.
  std::optional<ops::CollectiveChoice> collectives;
};

// A loaded model and the plan it was loaded by.
struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;
  io::ModelConfig config;
  io::QuantConfig quant;
  io::KvCacheDtypeResolution kv_cache;
  // fp8 cache: each layer's scale (fp8_kv_layer_scales); empty for other dtypes.
  std::vector<float> kv_scales;
  std::unique_ptr<Model> model;

  KvCache make_kv_cache(int64_t num_pages) const {
    return KvCache(model->ops(), config.num_hidden_layers, num_pages, config.kv_cache_entry_dim(), kv_cache.dtype,
                   kKvPageSize, kv_scales);
  }
};

// Reads config.json (+ hf_quant_config.json), applies the overrides of `options`, resolves the KV
// dtype for `backend` and checks every tensor header against the config; throws naming the file,
// tensor or flag at fault, e.g. for an architecture that has no implementation.
ModelPlan resolve_model(const std::filesystem::path& dir, const LoadOptions& options, const ops::Ops& backend);

// How far a load is: what the progress line on stderr and the server's /health report. Called from
// the loading thread (at least at the start and once with finished = true); must be thread-safe
// with whatever reads it.
struct LoadProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // checkpoint bytes uploaded / to upload
  double seconds = 0;                        // since the weights began to be read
  bool finished = false;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Opens and validates the checkpoint and builds the model of `plan` on `backend` (its weights
// uploaded there), reporting to `progress` as it goes.
LoadedModel load_model(const ModelPlan& plan, std::unique_ptr<ops::Ops> backend, const LoadProgressFn& progress = {});

// Both steps on a new backend for options.device (ops::make_backend) (`tessera generate`, `logits`, `inspect`, tests).
LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options = {},
                       const LoadProgressFn& progress = {});

}  // namespace tessera::model
