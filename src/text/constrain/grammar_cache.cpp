#include "text/constrain/grammar_cache.h"

namespace tessera::text::constrain {

std::shared_ptr<const TokenGrammar> GrammarCache::get(
    const std::string& key, const std::function<std::shared_ptr<const TokenGrammar>()>& build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  auto grammar = build();  // outside the lock: compiling takes milliseconds
  if (capacity_ == 0) return grammar;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->second = grammar;
    lru_.splice(lru_.begin(), lru_, it->second);
    return grammar;
  }
  lru_.emplace_front(key, grammar);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return grammar;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace tessera::text::constrain
