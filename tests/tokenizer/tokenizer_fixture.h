// Loads the fixture tokenizers once per test program (loading the 200k-token vocabularies takes a
// noticeable fraction of a second each).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "support/test_support.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::test {

inline const text::Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<text::Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[name];
  if (!slot) slot = text::load_tokenizer(fixtures_dir() / "tokenizers" / name);
  return *slot;
}

}  // namespace tessera::test
