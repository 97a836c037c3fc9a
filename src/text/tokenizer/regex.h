// Split-pattern regexes. The reference tokenizers compile their patterns with Rust `regex` /
// `fancy-regex` (tiktoken) or Oniguruma (HF tokenizers); we use PCRE2 (UTF + UCP, JIT) and
// translate the few constructs whose meaning differs, so that matches agree:
//   * `\p{Han}` (any script name): Rust and Oniguruma mean the Script property, PCRE2 >= 10.40 the
//     Script_Extensions property (which would pull CJK punctuation into Han) -> `\p{sc:Han}`.
//   * `\s` / `\S`: Rust and Oniguruma use White_Space, PCRE2-UCP uses \p{Z}+\h+\v, which also
//     contains U+180E -> an explicit White_Space class.
//   * character-class intersection `[A&&B]` (Rust only) -> `(?:(?=B)A)` with each operand as a
//     PCRE2 class.
// Anything else is passed through; constructs we do not understand inside a class are rejected.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace tessera::text {

// Rust-regex / Oniguruma pattern -> equivalent PCRE2 pattern. Throws core::Error for unsupported
// syntax.
std::string translate_pattern(std::string_view pattern);

class Regex {
 public:
  // `pattern` in Rust/Oniguruma syntax; `what` names it in error messages (file and field).
  Regex(std::string_view pattern, std::string_view what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for every non-empty leftmost-first match in `text`, left to right, each
  // search starting where the previous match ended. `text` must be valid UTF-8 (not re-checked).
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const;

  const std::string& pcre2_pattern() const { return translated_; }

 private:
  std::string translated_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace tessera::text
