#include "engine/prefix_cache.h"

#include <algorithm>

namespace tessera::engine {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t page_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ (static_cast<uint64_t>(tokens.size()) << 32));
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

std::optional<int32_t> PrefixCache::find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.parent != parent ||
      !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(), it->second.tokens.end()))
    return std::nullopt;
  return it->second.page;
}

bool PrefixCache::insert(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, int32_t page) {
  return entries_.try_emplace(hash, Entry{parent, std::vector<int32_t>(tokens.begin(), tokens.end()), page}).second;
}

void PrefixCache::erase(uint64_t hash) { entries_.erase(hash); }

}  // namespace tessera::engine
