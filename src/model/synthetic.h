// Random-weight models with a real model's layer shapes, for benchmarks that need the shapes and
// the bytes of a model too large to download or load (`tessera bench decode --synthetic`). The
// numbers such a model produces mean nothing; the work it does per step is the real model's.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v3_weights.h"
#include "model/kv_cache.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace tessera::model {

// Presets: "kimi-k2.5" (Kimi-K2.5 text model), "deepseek-v3", "tiny" (dsv3-tiny shapes, for tests).
// Every layer is a MoE layer (first_k_dense_replace = 0) so that each timed layer has the shape
// that dominates the real model; `layers` of them.
io::ModelConfig synthetic_config(const std::string& preset, int64_t layers);
std::vector<std::string> synthetic_presets();

// Random tensors created where the backend computes (device memory for CUDA) so that a 100 GB
// model costs no host time: bf16 values uniform in [-scale, scale), and bytes each
// (random & and_mask) | or_mask (quantized codes; a constant with and_mask 0).
struct RandomTensors {
  std::function<core::Tensor(core::Shape shape, float scale)> bf16;
  std::function<core::Tensor(core::Shape shape, uint8_t and_mask, uint8_t or_mask)> bytes;
};

// The checkpoint format a synthetic model's linears are in, as the real checkpoints lay them out:
// bf16 everywhere; DeepSeek-V3 FP8 (every linear but the router and lm_head in 128x128-block FP8);
// Kimi-K2.5 NVFP4 (the routed experts in NVFP4, the rest bf16).
enum class SyntheticFormat { kBf16, kFp8, kNvfp4 };
// "bf16", "fp8", "nvfp4"; throws naming --weights otherwise.
SyntheticFormat parse_synthetic_format(const std::string& name);
std::string synthetic_format_name(SyntheticFormat f);

// Weights for every tensor of `cfg` in `format` (norm weights 1, small router bias), of magnitudes
// about 1/sqrt(fan-in) so activations stay finite through the layers. With tp.size > 1, rank
// tp.rank's share in the shapes shard_weights gives it (its heads' rows of q_b and kv_b and columns
// of o_proj, its columns of the shared expert, its routed experts, its rows of lm_head), made
// directly in `format`: what one GPU of a tensor-parallel deployment holds.
ModelWeights synthetic_weights(const io::ModelConfig& cfg, ops::Ops& ops, const RandomTensors& random,
                               SyntheticFormat format = SyntheticFormat::kBf16, TensorParallel tp = {});

// Bytes one decode step must read per MoE layer at `batch` sequences of `context` cached tokens:
// attention weights, router, shared expert, the routed experts touched (expected distinct experts
// under uniform routing: E·(1 − (1 − k/E)^batch)) and the latent KV read and written, each weight
// at the bytes the device holds it in for `format` (FP8: 1 byte + a 4-byte scale per 128x128
// block; NVFP4: 4 bits + an e4m3 scale per 16; kv_b and the router bf16 whatever the format).
struct DecodeLayerBytes {
  double attention_weights = 0, router = 0, shared_expert = 0, routed_experts = 0, kv = 0;
  double expected_experts = 0;
  double total() const { return attention_weights + router + shared_expert + routed_experts + kv; }
};
// With tp.size > 1: what rank tp.rank reads (its share of the split weights, the replicated ones
// whole, the routed experts it holds that the batch touches) and of the KV cache, its part of a
// cache sharded by `kv` (pages of kKvPageSize stored positions), else all of it.
DecodeLayerBytes decode_layer_bytes(const io::ModelConfig& cfg, int64_t batch, int64_t context,
                                    double kv_bytes_per_element, SyntheticFormat format = SyntheticFormat::kBf16,
                                    TensorParallel tp = {}, KvShard kv = {});

}  // namespace tessera::model
