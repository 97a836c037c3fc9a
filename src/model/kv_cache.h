// The paged latent KV cache: per layer [num_pages, page_size, kv_lora_rank + qk_rope_head_dim],
// each entry [c_kv | k_pe (rotated)]. Pages are handed out by the engine's block manager; this
// class only owns the storage (and, for an fp8 cache, each layer's scale: see ops::KvLayerView).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "io/quant_config.h"
#include "ops/ops.h"

namespace tessera::model {

inline constexpr int64_t kKvPageSize = 64;

// A cache sharded by position over the `size` ranks of a tensor-parallel group (model/kv_shard.h):
// this rank's part. size 1: the whole cache.
struct KvShard {
  int rank = 0, size = 1;
  bool sharded() const { return size > 1; }
};

class KvCache {
 public:
  // Storage comes from the backend (`ops`), so pages live where the kernels run. `layer_scales`:
  // one fp8 scale per layer (positive, finite), or empty for 1.0 everywhere; caches of other
  // dtypes keep 1.0 whatever is given. `page_size`: positions a page of this cache stores. A
  // sharded cache's page is one rank's part of a page of page_size x shard.size positions (the
  // page the engine allocates), the same page index on every rank.
  KvCache(ops::Ops& ops, int64_t num_layers, int64_t num_pages, int64_t entry_dim, core::KvCacheDtype dtype,
          int64_t page_size = kKvPageSize, const std::vector<float>& layer_scales = {}, KvShard shard = {});

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_pages() const { return num_pages_; }
  // Positions of one page across the shard: what a block-table entry covers.
  int64_t page_size() const { return page_size_ * shard_.size; }
  // Positions of one page in this rank's storage (ops::KvLayerView::page_size).
  int64_t stored_page_size() const { return page_size_; }
  KvShard shard() const { return shard_; }
  int64_t entry_dim() const { return entry_dim_; }
  core::KvCacheDtype dtype() const { return dtype_; }
  ops::KvLayerView& layer(int64_t l) { return layers_.at(static_cast<size_t>(l)); }
  // Bytes of one token across all layers.
  static uint64_t bytes_per_token(int64_t num_layers, int64_t entry_dim, core::KvCacheDtype dtype);

 private:
  int64_t num_pages_, entry_dim_, page_size_;
  KvShard shard_;
  core::KvCacheDtype dtype_;
  std::vector<ops::KvLayerView> layers_;
};

// Per-layer scales of an fp8 latent cache from the checkpoint's calibrated scales: MLA caches one
// latent that is both K and V, so a layer uses its k_scale (as vLLM does for MLA), else 1.0. A
// layer whose v_scale differs from its k_scale is logged (once per call). Throws naming the layer
// for a scale that is not a positive finite number.
std::vector<float> fp8_kv_layer_scales(const std::vector<std::optional<float>>& k_scales,
                                       const std::vector<std::optional<float>>& v_scales);

// Pages needed to hold `tokens` tokens.
inline int64_t pages_for_tokens(int64_t tokens, int64_t page_size = kKvPageSize) {
  return (tokens + page_size - 1) / page_size;
}

}  // namespace tessera::model
