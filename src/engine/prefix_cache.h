// Content addressing of full KV pages: a page's key chains its parent's key with its token ids,
// so equal keys mean equal prefixes (verified on lookup, so a 64-bit collision cannot serve
// wrong KV). The cache maps keys to the page that holds them; the block manager decides when a
// page may be evicted.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera::engine {

inline constexpr uint64_t kRootPageHash = 0x9e3779b97f4a7c15ull;

uint64_t page_hash(uint64_t parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  // The page holding (parent, tokens), if cached.
  std::optional<int32_t> find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Records that `page` holds (parent, tokens); false if the key is already cached (by another page).
  bool insert(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, int32_t page);
  void erase(uint64_t hash);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t parent;
    std::vector<int32_t> tokens;
    int32_t page;
  };
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace tessera::engine
