// UTF-8 helpers with Python `str` semantics: templates index, slice, measure and strip strings by
// code point, and Python's notion of whitespace is wider than ASCII.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text::tpl {

// Decodes one code point at `pos` and advances it. Invalid bytes decode as themselves (one byte,
// value 0xDC00 + byte, like Python's surrogateescape) so that no input can stall a loop.
uint32_t utf8_next(std::string_view s, size_t& pos);
void utf8_append(std::string& out, uint32_t cp);
// Byte offset of each code point, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);

// str.isspace() for one code point.
bool py_isspace(uint32_t cp);
// str.strip()/lstrip()/rstrip() with no argument (Python whitespace) or with a set of characters.
std::string py_strip(std::string_view s, bool left, bool right);
std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);

}  // namespace tessera::text::tpl
