#include "model/kv_cache.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "core/error.h"

namespace tessera::model {

KvCache::KvCache(ops::Ops& ops, int64_t num_layers, int64_t num_pages, int64_t entry_dim, core::KvCacheDtype dtype,
                 int64_t page_size, const std::vector<float>& layer_scales, KvShard shard)
    : num_pages_(num_pages), entry_dim_(entry_dim), page_size_(page_size), shard_(shard), dtype_(dtype) {
  TESSERA_CHECK(num_pages > 0 && page_size > 0, "KV cache needs at least one page");
  TESSERA_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size, "KV cache: shard {} of {}", shard.rank,
                shard.size);
  TESSERA_CHECK(layer_scales.empty() || static_cast<int64_t>(layer_scales.size()) == num_layers,
                "KV cache: {} layer scales for {} layers", layer_scales.size(), num_layers);
  for (int64_t l = 0; l < num_layers; ++l) {
    float scale = 1.0f;
    if (dtype == core::KvCacheDtype::kFp8E4M3 && !layer_scales.empty()) scale = layer_scales[static_cast<size_t>(l)];
    TESSERA_CHECK(std::isfinite(scale) && scale > 0.0f, "KV cache: layer {} scale {} is not a positive finite number",
                  l, scale);
    layers_.push_back({ops.empty_kv_pages({num_pages, page_size, entry_dim}, dtype), page_size, scale});
  }
}

uint64_t KvCache::bytes_per_token(int64_t num_layers, int64_t entry_dim, core::KvCacheDtype dtype) {
  uint64_t elem = dtype == core::KvCacheDtype::kF32 ? 4 : dtype == core::KvCacheDtype::kBF16 ? 2 : 1;
  return static_cast<uint64_t>(num_layers * entry_dim) * elem;
}

std::vector<float> fp8_kv_layer_scales(const std::vector<std::optional<float>>& k_scales,
                                       const std::vector<std::optional<float>>& v_scales) {
  std::vector<float> out;
  int64_t from_checkpoint = 0, differing = 0, first_differing = -1;
  for (size_t l = 0; l < k_scales.size(); ++l) {
    const float k = k_scales[l].value_or(1.0f);
    TESSERA_CHECK(std::isfinite(k) && k > 0.0f, "layer {}: KV cache k_scale {} is not a positive finite number", l, k);
    from_checkpoint += k_scales[l].has_value();
    const std::optional<float> v = l < v_scales.size() ? v_scales[l] : std::nullopt;
    if (v && *v != k) {
      if (differing++ == 0) first_differing = static_cast<int64_t>(l);
    }
    out.push_back(k);
  }
  if (differing > 0)
    spdlog::warn(
        "fp8 KV cache: v_scale differs from k_scale in {} layers (first: layer {}); MLA caches one latent "
        "for K and V, so k_scale is used",
        differing, first_differing);
  spdlog::info("fp8 KV cache: k_scale from the checkpoint for {} of {} layers, 1.0 for the rest", from_checkpoint,
               k_scales.size());
  return out;
}

}  // namespace tessera::model
