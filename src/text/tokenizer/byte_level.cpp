#include "text/tokenizer/byte_level.h"

#include <array>

#include "text/tokenizer/utf8.h"

namespace tessera::text {
namespace {

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, 324> to_byte{};  // every code point of the alphabet is < 0x144
  Tables() {
    to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_unicode[b] = cp;
      to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) { return tables().to_unicode[b]; }

int unicode_to_byte(char32_t cp) { return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1; }

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_unicode(b));
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step st = utf8_step(token.substr(i));
    if (st.status != Utf8Status::kValid) return false;
    const int b = unicode_to_byte(st.code_point);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += st.length;
  }
  return true;
}

}  // namespace tessera::text
