// Fuzzes tiktoken encoding (Kimi-style) on arbitrary bytes: invalid UTF-8 must be
// a core::Error; valid UTF-8 must encode, and decode back to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "fuzz_common.h"
#include "text/tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size == 0) return 0;
  const auto& tok = fuzz::fixture_tokenizer("kimi-style-tiktoken");
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  text::EncodeOptions opt;
  opt.parse_special = (data[0] & 2) == 0;
  try {
    const auto ids = tok.encode(text, opt);
    if (tok.decode(ids) != text) std::abort();  // byte-level BPE is lossless on valid UTF-8
  } catch (const core::Error&) {
    if (text::is_valid_utf8(text)) std::abort();  // only invalid input may be refused
  }
  return 0;
}
