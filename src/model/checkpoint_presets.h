// What a real checkpoint of each supported model looks like on disk, for `tessera make-checkpoint`:
// its config.json (and hf_quant_config.json), and the name, dtype, shape and value distribution of
// every tensor, in file order. The layouts copy the real formats (shared/reference/formats.md and
// the fixtures in shared/fixtures/models, which the tests compare against):
//   kimi-k2.5-nvfp4   KimiK25ForConditionalGeneration, LM under "language_model.", routed experts
//                     in ModelOpt NVFP4, everything else BF16, FP8 KV-cache hint + k/v scales, a
//                     small stand-in vision tower and mm_projector (skipped by loaders)
//   deepseek-v3-fp8   DeepseekV3ForCausalLM, DeepSeek FP8 128x128 block weights for every linear
//                     but embeddings, lm_head and the router
//   deepseek-v3-bf16  the same model, all BF16
// Sizes are the real model's (hidden 7168, ...) except the layer and expert counts, which the user
// picks, and the optional overrides that make tiny test checkpoints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors_writer.h"

namespace tessera::model {

enum class CheckpointKind { kKimiK25Nvfp4, kDeepseekV3Fp8, kDeepseekV3Bf16 };

// The --like spellings: "kimi-k2.5-nvfp4", "deepseek-v3-fp8", "deepseek-v3-bf16".
std::optional<CheckpointKind> parse_checkpoint_kind(const std::string& name);
std::string checkpoint_kind_name(CheckpointKind kind);
std::vector<std::string> checkpoint_kind_names();

struct CheckpointDims {
  int64_t layers = 0;   // num_hidden_layers
  int64_t experts = 0;  // n_routed_experts
  int64_t hidden = 7168;
  int64_t vocab = 129280;
  int64_t moe_intermediate = 2048;
  int64_t intermediate = 18432;
  int64_t heads = 128;
  int64_t q_lora_rank = 1536;
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  int64_t shared_experts = 1;
  // --first-dense: the number of leading dense layers, or -1 for finalize_dims's choice.
  int64_t first_dense_override = -1;
  // Derived by finalize_dims from the real model's values and the sizes above.
  int64_t top_k = 8;
  int64_t n_group = 8;
  int64_t topk_group = 4;
  int64_t first_k_dense = 3;
};

// The real model's dimensions (layers and experts left 0 for the caller to set).
CheckpointDims real_dims(CheckpointKind kind);

// Checks the sizes (throws core::Error naming the flag: --layers, --experts, --hidden, --vocab,
// --moe-intermediate, --intermediate, --heads) and derives the routing and dense-layer values so the
// result is a model the loader accepts: top-k clamped to the experts; n_group the largest value up to
// the real one that divides the experts with >= 2 experts per group (the grouped router takes each
// group's top two); topk_group raised until the selected groups hold top-k experts; the real number
// of dense layers when the model has more layers than that, else 1 dense layer then MoE (0 for a
// single layer, so that it is a MoE layer), or first_dense_override where it is set (0..layers).
void finalize_dims(CheckpointKind kind, CheckpointDims& dims);

// How a tensor's values are drawn (the generator is in random_checkpoint.h).
struct Fill {
  enum class Kind {
    kUniform,      // uniform on [mean - half_width, mean + half_width], rounded to the dtype
    kConstant,     // every element = mean
    kRandomBytes,  // uniformly random bytes (packed e2m1 codes: every code is a finite number)
  };
  Kind kind = Kind::kUniform;
  double mean = 0.0;
  double half_width = 0.0;
};

struct TensorPlan {
  io::TensorSpec spec;
  Fill fill;
};

struct CheckpointLayout {
  CheckpointKind kind;
  CheckpointDims dims;
  nlohmann::ordered_json config;                          // config.json
  std::optional<nlohmann::ordered_json> hf_quant_config;  // hf_quant_config.json, where the real one has it
  std::vector<TensorPlan> tensors;  // in file order: embeddings, layers, final norm, head, other towers
  uint64_t total_bytes() const;
};

// `dims` must have been through finalize_dims.
CheckpointLayout checkpoint_layout(CheckpointKind kind, const CheckpointDims& dims);

// Standard deviations the generated values aim at (tests check the dequantized weights against them).
// Linear weights: min(0.02, 1/sqrt(in)), so activations neither blow up nor vanish through 61 layers.
double linear_weight_std(int64_t in);
inline constexpr double kEmbeddingStd = 0.02;

}  // namespace tessera::model
