// A small thread-safe LRU cache of TokenGrammars by key (e.g. the schema's compact JSON text plus
// the response_format kind), so that repeated requests with the same schema skip the per-schema
// precomputation (~25 ms for a typical schema, docs/CONSTRAINED_DECODING.md). Shared by requests;
// compilation runs outside the lock, so two requests missing on the same key both compile and the
// second result replaces the first.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "text/constrain/token_matcher.h"

namespace tessera::text::constrain {

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}

  // The cached grammar for `key`, or build() (whose exceptions propagate; nothing is cached then).
  std::shared_ptr<const TokenGrammar> get(const std::string& key,
                                          const std::function<std::shared_ptr<const TokenGrammar>()>& build);
  size_t size() const;
  size_t hits() const;
  size_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const TokenGrammar>>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace tessera::text::constrain
