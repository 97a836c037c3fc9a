// Random-weight models with a real model's layer shapes, for benchmarks that need the shapes and
// the bytes of a model too large to download or load (`tessera bench decode --synthetic`). The
// numbers such a model produces mean nothing; the work it does per step is the real model's.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v3_weights.h"
#include "ops/ops.h"

namespace tessera::model {

// Presets: "kimi-k2.5" (Kimi-K2.5 text model), "deepseek-v3", "tiny" (dsv3-tiny shapes, for tests).
// Every layer is a MoE layer (first_k_dense_replace = 0) so that each timed layer has the shape
// that dominates the real model; `layers` of them.
io::ModelConfig synthetic_config(const std::string& preset, int64_t layers);
std::vector<std::string> synthetic_presets();

// A bf16 [shape] tensor of uniform values in [-scale, scale), created where the backend computes
// (device memory for CUDA) so that a 100 GB model costs no host time.
using RandomBf16 = std::function<core::Tensor(core::Shape shape, float scale)>;

// Dense bf16 weights for every tensor of `cfg` (norm weights 1, small router bias), scaled by
// 1/sqrt(fan-in) so activations stay finite through the layers.
ModelWeights synthetic_weights(const io::ModelConfig& cfg, ops::Ops& ops, const RandomBf16& random_bf16);

// Bytes one decode step must read per MoE layer at `batch` sequences of `context` cached tokens:
// attention weights, router, shared expert, the routed experts touched (expected distinct experts
// under uniform routing: E·(1 − (1 − k/E)^batch)) and the latent KV read and written, bf16 weights.
struct DecodeLayerBytes {
  double attention_weights = 0, router = 0, shared_expert = 0, routed_experts = 0, kv = 0;
  double expected_experts = 0;
  double total() const { return attention_weights + router + shared_expert + routed_experts + kv; }
};
DecodeLayerBytes decode_layer_bytes(const io::ModelConfig& cfg, int64_t batch, int64_t context,
                                    double kv_bytes_per_element);

}  // namespace tessera::model
