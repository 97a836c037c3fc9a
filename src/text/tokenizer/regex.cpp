#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer/regex.h"

#include <pcre2.h>

#include <array>
#include <vector>

#include "core/error.h"

namespace tessera::text {
namespace {

// Unicode White_Space (what Rust's and Oniguruma's \s match), as items usable inside a class.
constexpr std::string_view kWhiteSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

bool is_general_category(std::string_view name) {
  static constexpr std::array<std::string_view, 38> kCategories = {
      "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "L&", "M",  "Mn", "Mc", "Me", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd",
      "Ps", "Pe", "Pi", "Pf", "Po", "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Co", "Cn"};
  for (auto c : kCategories)
    if (c == name) return true;
  return name == "Any" || name == "Cs";
}

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  std::string run() {
    std::string out;
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '[') {
        out += parse_class();
      } else if (c == '\\') {
        out += escape(/*in_class=*/false);
      } else {
        out.push_back(c);
        ++i_;
      }
    }
    return out;
  }

 private:
  [[noreturn]] void unsupported(std::string_view why) {
    core::fail("unsupported regex construct at offset {} ({}) in pattern '{}'", i_, why, p_);
  }

  // Translates the escape at p_[i_] == '\\'. Inside a class the result must be class items.
  std::string escape(bool in_class) {
    if (i_ + 1 >= p_.size()) unsupported("trailing backslash");
    const char e = p_[i_ + 1];
    if (e == 'p' || e == 'P') {
      std::string name;
      size_t end;
      if (i_ + 2 < p_.size() && p_[i_ + 2] == '{') {
        end = p_.find('}', i_ + 3);
        if (end == std::string_view::npos) unsupported("unterminated \\p{");
        name = std::string(p_.substr(i_ + 3, end - (i_ + 3)));
        ++end;
      } else {
        if (i_ + 2 >= p_.size()) unsupported("\\p without a name");
        name = std::string(1, p_[i_ + 2]);
        end = i_ + 3;
      }
      i_ = end;
      const bool has_prefix = name.find(':') != std::string::npos || name.find('=') != std::string::npos;
      if (!has_prefix && !is_general_category(name)) name = "sc:" + name;
      return std::string("\\") + e + "{" + name + "}";
    }
    if (e == 's') {
      i_ += 2;
      return in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
    }
    if (e == 'S') {
      if (in_class) unsupported("\\S inside a character class");
      i_ += 2;
      return "[^" + std::string(kWhiteSpaceItems) + "]";
    }
    // Everything else (\r, \n, \t, \x.., \\, \-, \[, \d, ...) has the same meaning in PCRE2.
    std::string out(p_.substr(i_, 2));
    i_ += 2;
    if (e == 'x' && i_ < p_.size() && p_[i_] == '{') {
      const size_t end = p_.find('}', i_);
      if (end == std::string_view::npos) unsupported("unterminated \\x{");
      out += p_.substr(i_, end + 1 - i_);
      i_ = end + 1;
    }
    return out;
  }

  // Parses a class starting at p_[i_] == '[' and returns a PCRE2 construct matching one code
  // point: a plain class, or a group with lookaheads when the class uses intersection.
  std::string parse_class() {
    ++i_;  // '['
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    // operands of &&; each operand is a list of items plus nested classes (union).
    std::vector<std::string> operands(1);
    std::vector<std::vector<std::string>> nested(1);
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) unsupported("unterminated character class");
      const char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        i_ += 2;
        operands.emplace_back();
        nested.emplace_back();
        continue;
      }
      if (c == '[') {
        if (p_.substr(i_, 2) == "[:") unsupported("POSIX class");
        nested.back().push_back(parse_class());
        continue;
      }
      if (c == '\\') {
        operands.back() += escape(/*in_class=*/true);
        continue;
      }
      operands.back().push_back(c);
      ++i_;
    }
    // Each operand -> one PCRE2 construct matching a single code point.
    std::vector<std::string> parts;
    for (size_t k = 0; k < operands.size(); ++k) {
      std::vector<std::string> alts;
      if (!operands[k].empty()) alts.push_back("[" + operands[k] + "]");
      for (auto& n : nested[k]) alts.push_back(n);
      if (alts.empty()) unsupported("empty class operand");
      if (alts.size() == 1) {
        parts.push_back(alts[0]);
      } else {
        std::string u = "(?:";
        for (size_t a = 0; a < alts.size(); ++a) u += (a ? "|" : "") + alts[a];
        parts.push_back(u + ")");
      }
    }
    std::string body;
    if (parts.size() == 1) {
      body = parts[0];
    } else {
      // [A&&B&&C] -> (?:(?=B)(?=C)A): the lookaheads test the same code point A consumes.
      body = "(?:";
      for (size_t k = 1; k < parts.size(); ++k) body += "(?=" + parts[k] + ")";
      body += parts[0] + ")";
    }
    if (!negated) return body;
    // Plain negated class: keep it a class (cheaper); otherwise a negative lookahead.
    if (parts.size() == 1 && nested[0].empty()) return "[^" + operands[0] + "]";
    return "(?:(?!" + body + ")(?s:.))";
  }

  std::string_view p_;
  size_t i_ = 0;
};

struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long runs (25k letters) with greedy classes need more than the default 32 KiB JIT stack.
    jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string translate_pattern(std::string_view pattern) { return Translator(pattern).run(); }

Regex::Regex(std::string_view pattern, std::string_view what) {
  try {
    translated_ = translate_pattern(pattern);
  } catch (const core::Error& e) {
    core::fail("{}: {}", what, e.what());
  }
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated_.data()), translated_.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (!code) {
    std::array<PCRE2_UCHAR, 256> msg{};
    pcre2_get_error_message(err, msg.data(), msg.size());
    core::fail("{}: cannot compile regex '{}' (as PCRE2 '{}'): {} at offset {}", what, pattern, translated_,
               reinterpret_cast<const char*>(msg.data()), offset);
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, 0, st.data, st.context)
                        : pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(rc, msg.data(), msg.size());
      core::fail("regex '{}' failed on a {}-byte input: {}", translated_, text.size(),
                 reinterpret_cast<const char*>(msg.data()));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      f(b, e);
      start = e;
    } else {
      // Empty match: step over one code point (Rust find_iter never yields overlapping text).
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace tessera::text
