#include "model/kv_cache.h"

#include "core/error.h"

namespace tessera::model {

KvCache::KvCache(ops::Ops& ops, int64_t num_layers, int64_t num_pages, int64_t entry_dim, io::KvCacheDtype dtype,
                 int64_t page_size)
    : num_pages_(num_pages), entry_dim_(entry_dim), page_size_(page_size), dtype_(dtype) {
  TESSERA_CHECK(num_pages > 0 && page_size > 0, "KV cache needs at least one page");
  for (int64_t l = 0; l < num_layers; ++l)
    layers_.push_back({ops.empty_kv_pages({num_pages, page_size, entry_dim}, dtype), page_size});
}

uint64_t KvCache::bytes_per_token(int64_t num_layers, int64_t entry_dim, io::KvCacheDtype dtype) {
  uint64_t elem = dtype == io::KvCacheDtype::kF32 ? 4 : dtype == io::KvCacheDtype::kBF16 ? 2 : 1;
  return static_cast<uint64_t>(num_layers * entry_dim) * elem;
}

}  // namespace tessera::model
