// UTF-8 helpers shared by the tokenizers and the incremental detokenizer: validation, decoding of
// one code point with the Unicode "maximal subpart" rule for invalid input (the rule Rust's
// String::from_utf8_lossy and Python's errors="replace" both follow, so our U+FFFD placement
// matches the reference decoders byte for byte).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera::text {

enum class Utf8Status {
  kValid,       // a complete, valid sequence of `length` bytes
  kIncomplete,  // every byte so far is valid, but the sequence needs more bytes than are present
  kInvalid,     // `length` bytes (>= 1) form one maximal invalid subpart: replace with one U+FFFD
};

struct Utf8Step {
  Utf8Status status;
  size_t length;
  char32_t code_point;  // only for kValid
};

// Classifies the sequence starting at s[0] (s must be non-empty).
Utf8Step utf8_step(std::string_view s);

// Byte offset of the first invalid or truncated sequence, or s.size() when s is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

// Decodes s, replacing each maximal invalid subpart (and a truncated tail) with U+FFFD.
std::string utf8_lossy(std::string_view s);

void append_utf8(std::string& out, char32_t cp);

// Decodes the valid code point at s[pos] (caller guarantees validity) and advances pos.
char32_t next_code_point(std::string_view s, size_t& pos);

}  // namespace tessera::text
