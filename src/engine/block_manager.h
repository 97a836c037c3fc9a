// KV pages with reference counts. A page is either free (on the free list), in use (ref > 0), or
// cached and idle (ref == 0 but registered in the prefix cache, kept until its memory is needed:
// evicted least-recently-released first). Sequences sharing a prefix hold the same pages.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/prefix_cache.h"

namespace tessera::engine {

class BlockManager {
 public:
  BlockManager(int64_t num_pages, int64_t page_size, bool enable_prefix_cache = true);

  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  int64_t page_size() const { return page_size_; }
  // Pages that allocate() can hand out now (free + idle cached).
  int64_t num_available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t num_used() const { return num_pages() - num_available(); }
  int64_t num_cached_idle() const { return static_cast<int64_t>(lru_.size()); }

  // A page with ref 1, evicting the least recently used idle cached page if no page is free.
  std::optional<int32_t> allocate();
  void retain(int32_t page);
  void release(int32_t page);
  int64_t ref_count(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }

  // Prefix cache: a cached page holding (parent, tokens) with one more reference, if any.
  std::optional<int32_t> acquire_cached(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  // Registers an in-use, fully written page under its key (no-op if the key is cached already).
  void register_page(int32_t page, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  bool prefix_cache_enabled() const { return enable_prefix_cache_; }

  // Empty string when no page is referenced and the free/idle lists account for every page;
  // otherwise what is wrong (the leak check of the tests and of Engine::leak_report, which serve logs
  // at exit).
  std::string leak_report() const;

 private:
  int64_t page_size_;
  bool enable_prefix_cache_;
  std::vector<int64_t> refs_;
  std::vector<int32_t> free_;  // never-cached or evicted pages, LIFO
  std::list<int32_t> lru_;     // idle cached pages, oldest first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  std::vector<std::optional<uint64_t>> page_key_;  // key of each cached page
  PrefixCache cache_;
};

}  // namespace tessera::engine
