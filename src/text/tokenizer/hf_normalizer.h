// HF tokenizers normalizers: null, Sequence, and the Unicode normalization forms (NFC, NFD, NFKC,
// NFKD) when tessera is built with ICU. Anything else is refused at load time with the field name.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace tessera::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// nullptr when the spec is null or an empty Sequence (identity).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace tessera::text
