#include "engine/block_manager.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::engine {

BlockManager::BlockManager(int64_t num_pages, int64_t page_size, bool enable_prefix_cache)
    : page_size_(page_size),
      enable_prefix_cache_(enable_prefix_cache),
      refs_(static_cast<size_t>(num_pages), 0),
      lru_pos_(static_cast<size_t>(num_pages)),
      in_lru_(static_cast<size_t>(num_pages), false),
      page_key_(static_cast<size_t>(num_pages)) {
  TESSERA_CHECK(num_pages > 0 && page_size > 0, "block manager needs pages (got {} pages of {})", num_pages, page_size);
  // Hand out low page ids first (LIFO free list), which keeps tests readable.
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

std::optional<int32_t> BlockManager::allocate() {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    page = lru_.front();
    lru_.pop_front();
    in_lru_[static_cast<size_t>(page)] = false;
    auto& key = page_key_[static_cast<size_t>(page)];
    cache_.erase(*key);
    key.reset();
  } else {
    return std::nullopt;
  }
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

void BlockManager::retain(int32_t page) {
  auto p = static_cast<size_t>(page);
  if (in_lru_[p]) {
    lru_.erase(lru_pos_[p]);
    in_lru_[p] = false;
  }
  ++refs_[p];
}

void BlockManager::release(int32_t page) {
  auto p = static_cast<size_t>(page);
  TESSERA_CHECK(refs_[p] > 0, "block manager: page {} released more often than retained", page);
  if (--refs_[p] > 0) return;
  if (page_key_[p]) {
    lru_.push_back(page);
    lru_pos_[p] = std::prev(lru_.end());
    in_lru_[p] = true;
  } else {
    free_.push_back(page);
  }
}

std::optional<int32_t> BlockManager::acquire_cached(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  if (!enable_prefix_cache_) return std::nullopt;
  auto page = cache_.find(hash, parent, tokens);
  if (page) retain(*page);
  return page;
}

void BlockManager::register_page(int32_t page, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  auto p = static_cast<size_t>(page);
  if (!enable_prefix_cache_ || page_key_[p]) return;
  TESSERA_CHECK(refs_[p] > 0, "block manager: registering page {} that nobody holds", page);
  if (cache_.insert(hash, parent, tokens, page)) page_key_[p] = hash;
}

std::string BlockManager::leak_report() const {
  std::string r;
  int64_t held = 0;
  for (size_t p = 0; p < refs_.size(); ++p)
    if (refs_[p] != 0) {
      if (held < 8) r += fmt::format("page {} has {} references; ", p, refs_[p]);
      ++held;
    }
  if (held > 0)
    r += fmt::format("{} of {} pages still referenced", held, refs_.size());
  else if (num_available() != num_pages())
    r = fmt::format("{} free + {} idle cached pages, expected {}", free_.size(), lru_.size(), refs_.size());
  return r;
}

}  // namespace tessera::engine
