// Shared by the tokenizer fuzz targets: loads a fixture tokenizer once per process.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "text/tokenizer/tokenizer.h"

namespace tessera::fuzz {

inline const text::Tokenizer& fixture_tokenizer(const char* name) {
  static std::unique_ptr<text::Tokenizer> cache[3];
  static const char* names[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i) {
    if (names[i] && std::string(names[i]) == name) return *cache[i];
    if (!names[i]) {
      const char* env = std::getenv("TESSERA_FIXTURES");
      const std::filesystem::path root = env ? env : TESSERA_FIXTURES_DIR;
      cache[i] = text::load_tokenizer(root / "tokenizers" / name);
      names[i] = name;
      return *cache[i];
    }
  }
  std::abort();
}

}  // namespace tessera::fuzz
