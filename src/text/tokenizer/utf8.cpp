#include "text/tokenizer/utf8.h"

#include "core/utf8.h"

namespace tessera::text {

Utf8Step utf8_step(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Status::kValid, 1, b0};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Status::kInvalid, 1, 0};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= n) return {Utf8Status::kIncomplete, n, 0};
    const unsigned char b = p[i];
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Status::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kValid, need + 1, cp};
}

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s.substr(i));
    if (st.status != Utf8Status::kValid) return i;
    i += st.length;
  }
  return i;
}

void append_utf8(std::string& out, char32_t cp) { core::append_utf8(out, cp); }

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s.substr(i));
    if (st.status == Utf8Status::kValid) {
      out.append(s.data() + i, st.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.length;
  }
  return out;
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const Utf8Step st = utf8_step(s.substr(pos));
  pos += st.length;
  return st.code_point;
}

}  // namespace tessera::text
