// The GPT-2 "byte-level" alphabet: every byte is shown as one printable code point (printable
// Latin-1 bytes as themselves, the rest as U+0100 + n). tokenizer.json vocabularies are written in
// it; we convert them back to raw bytes at load time so BPE runs on bytes.
#pragma once

#include <string>
#include <string_view>

namespace tessera::text {

// Code point that represents byte b.
char32_t byte_to_unicode(unsigned char b);
// Byte represented by code point cp, or -1 when cp is not in the alphabet.
int unicode_to_byte(char32_t cp);
// Raw bytes -> byte-level string (UTF-8).
std::string byte_level_encode(std::string_view bytes);
// Byte-level string (UTF-8) -> raw bytes. Returns false (out unspecified) when some code point is
// not in the alphabet or the input is not valid UTF-8.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace tessera::text
