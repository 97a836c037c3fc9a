#include "text/template/utf8.h"

#include "core/utf8.h"

#include <algorithm>

namespace tessera::text::tpl {

uint32_t utf8_next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  auto invalid = [&] {
    ++pos;
    return 0xDC00u + b0;
  };
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int len = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return invalid();
  }
  if (pos + len > s.size()) return invalid();
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return invalid();
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid();
  pos += len;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an invalid byte carried through by utf8_next
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    core::append_utf8(out, cp);
  }
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    offs.push_back(pos);
    utf8_next(s, pos);
  }
  offs.push_back(s.size());
  return offs;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) {
    utf8_next(s, pos);
    ++n;
  }
  return n;
}

bool py_isspace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
template <class Pred>
std::string strip_if(std::string_view s, bool left, bool right, Pred is_strip) {
  const auto offs = utf8_offsets(s);
  size_t n = offs.size() - 1, b = 0, e = n;
  auto cp_at = [&](size_t i) {
    size_t p = offs[i];
    return utf8_next(s, p);
  };
  if (left)
    while (b < e && is_strip(cp_at(b))) ++b;
  if (right)
    while (e > b && is_strip(cp_at(e - 1))) --e;
  return std::string(s.substr(offs[b], offs[e] - offs[b]));
}
}  // namespace

std::string py_strip(std::string_view s, bool left, bool right) { return strip_if(s, left, right, py_isspace); }

std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<uint32_t> set;
  for (size_t p = 0; p < chars.size();) set.push_back(utf8_next(chars, p));
  return strip_if(s, left, right, [&](uint32_t cp) { return std::find(set.begin(), set.end(), cp) != set.end(); });
}

// Case mapping covers ASCII, Latin-1, Greek and Cyrillic: what chat templates plausibly touch.
std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t p = 0; p < s.size();) {
    uint32_t cp = utf8_next(s, p);
    if ((cp >= 'a' && cp <= 'z') || (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) ||
        (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) || (cp >= 0x430 && cp <= 0x44F))
      cp -= 0x20;
    else if (cp >= 0x450 && cp <= 0x45F)
      cp -= 0x50;
    utf8_append(out, cp);
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t p = 0; p < s.size();) {
    uint32_t cp = utf8_next(s, p);
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) ||
        (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) || (cp >= 0x410 && cp <= 0x42F))
      cp += 0x20;
    else if (cp >= 0x400 && cp <= 0x40F)
      cp += 0x50;
    utf8_append(out, cp);
  }
  return out;
}

}  // namespace tessera::text::tpl
