#include "text/template/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "text/template/error.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {
namespace {

[[noreturn]] void lex_fail(const std::string& msg, int line) {
  throw TemplateError("TemplateSyntaxError: " + msg + " (line " + std::to_string(line) + ")");
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Length of a run of Python whitespace starting at `pos`.
size_t space_run(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    size_t q = p;
    if (!py_isspace(utf8_next(s, q))) break;
    p = q;
  }
  return p - pos;
}

bool all_space(std::string_view s) { return !s.empty() && space_run(s, 0) == s.size(); }

std::string rstrip_space(std::string_view s) { return py_strip(s, false, true); }

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o) : s_(std::move(src)), o_(o) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t open = find_open(pos);
      if (open == std::string::npos) {
        emit_data(s_.substr(pos));
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char ctrl = open + 2 < s_.size() ? s_[open + 2] : '\0';
      std::string text = s_.substr(pos, open - pos);
      if (ctrl == '-') {
        text = rstrip_space(text);
      } else if (ctrl != '+' && o_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
      }
      line_ += count_newlines(pos, open);
      emit_data(std::move(text));
      size_t body = open + 2 + ((ctrl == '-' || ctrl == '+') ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(body, line_starting);
      } else if (kind == '%' && is_raw_begin(body)) {
        pos = lex_raw(body, line_starting);
      } else {
        pos = lex_tag(kind == '{', body, line_starting);
      }
    }
    Token eof;
    eof.type = Tok::Eof;
    eof.line = line_;
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  std::string s_;
  LexOptions o_;
  std::vector<Token> toks_;
  int line_ = 1;

  int count_newlines(size_t a, size_t b) const {
    int n = 0;
    for (size_t k = a; k < b && k < s_.size(); ++k) n += s_[k] == '\n';
    return n;
  }

  size_t find_open(size_t pos) const {
    for (size_t p = s_.find('{', pos); p != std::string::npos; p = s_.find('{', p + 1)) {
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void emit_data(std::string text) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::Data;
    t.text = std::move(text);
    t.line = line_;
    toks_.push_back(std::move(t));
  }

  void emit(Tok type, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_;
    toks_.push_back(std::move(t));
  }

  // After a block or comment end: `-` strips all following whitespace, `+` keeps it, otherwise
  // trim_blocks removes one newline.
  size_t after_end(size_t end_pos, char ctrl, bool trim, bool& line_starting) {
    size_t p = end_pos;
    if (ctrl == '-') {
      size_t n = space_run(s_, p);
      line_ += count_newlines(p, p + n);
      p += n;
    } else if (ctrl != '+' && trim && p < s_.size() && s_[p] == '\n') {
      ++line_;
      ++p;
    }
    line_starting = p > 0 && s_[p - 1] == '\n';
    return p;
  }

  size_t lex_comment(size_t body, bool& line_starting) {
    size_t close = s_.find("#}", body);
    if (close == std::string::npos) lex_fail("Missing end of comment tag", line_);
    char ctrl = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : '\0';
    line_ += count_newlines(body, close);
    return after_end(close + 2, ctrl, o_.trim_blocks, line_starting);
  }

  // `{% raw %}` (with optional -/+) at `body`?
  bool is_raw_begin(size_t body) const {
    size_t p = body + space_run(s_, body);
    if (s_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < s_.size() && is_name_char(s_[p])) return false;
    p += space_run(s_, p);
    return s_.compare(p, 2, "%}") == 0 || s_.compare(p, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t body, bool& line_starting) {
    size_t p = body + space_run(s_, body) + 3;
    p += space_run(s_, p);
    if (s_[p] == '-') {
      p += 3;
      p += space_run(s_, p);
    } else {
      p += 2;  // jinja2 applies no trim_blocks to the raw opening tag
    }
    // Find `{% endraw %}` with its own whitespace control.
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t r = q + 2;
      char open_ctrl = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : '\0';
      if (open_ctrl) ++r;
      r += space_run(s_, r);
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      r += space_run(s_, r);
      char close_ctrl = '\0';
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) close_ctrl = s_[r++];
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string text = s_.substr(p, q - p);
      if (open_ctrl == '-') text = rstrip_space(text);
      line_ += count_newlines(p, q);
      emit_data(std::move(text));
      return after_end(r + 2, close_ctrl, o_.trim_blocks, line_starting);
    }
    lex_fail("Missing end of raw directive", line_);
  }

  size_t lex_tag(bool is_var, size_t p, bool& line_starting) {
    emit(is_var ? Tok::VarBegin : Tok::BlockBegin);
    int balance = 0;
    while (true) {
      size_t n = space_run(s_, p);
      line_ += count_newlines(p, p + n);
      p += n;
      if (p >= s_.size())
        lex_fail(is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'",
                 line_);
      if (balance == 0) {
        const char* end = is_var ? "}}" : "%}";
        char ctrl = '\0';
        size_t q = p;
        if ((s_[q] == '-' || (!is_var && s_[q] == '+')) && s_.compare(q + 1, 2, end) == 0) ctrl = s_[q++];
        if (s_.compare(q, 2, end) == 0) {
          emit(is_var ? Tok::VarEnd : Tok::BlockEnd);
          // trim_blocks never applies to `}}`.
          return after_end(q + 2, ctrl, !is_var, line_starting);
        }
      }
      const char c = s_[p];
      if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t q = p;
        while (q < s_.size() && is_name_char(s_[q])) ++q;
        emit(Tok::Name, s_.substr(p, q - p));
        p = q;
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                     "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        bool matched = false;
        for (const char* op : kOps) {
          size_t len = std::char_traits<char>::length(op);
          if (s_.compare(p, len, op) == 0) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++balance;
            if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && balance > 0) --balance;
            emit(Tok::Op, op);
            p += len;
            matched = true;
            break;
          }
        }
        if (!matched) lex_fail(std::string("unexpected char '") + c + "'", line_);
      }
    }
  }

  size_t lex_string(size_t p) {
    const char q = s_[p];
    std::string out;
    size_t k = p + 1;
    const int start_line = line_;
    while (true) {
      if (k >= s_.size()) lex_fail("unexpected end of string", start_line);
      char c = s_[k];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out.push_back(c);
        ++k;
        continue;
      }
      if (k + 1 >= s_.size()) lex_fail("unexpected end of string", start_line);
      char e = s_[k + 1];
      k += 2;
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\n':
          ++line_;
          break;  // backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          int digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int d = 0; d < digits; ++d, ++k) {
            char h = k < s_.size() ? s_[k] : '\0';
            int v = is_digit(h)              ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (v < 0) lex_fail("truncated \\" + std::string(1, e) + " escape in string", start_line);
            cp = cp * 16 + static_cast<uint32_t>(v);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            lex_fail("invalid code point in string escape", start_line);
          utf8_append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k < s_.size() && s_[k] >= '0' && s_[k] <= '7'; ++d, ++k)
              cp = cp * 8 + static_cast<uint32_t>(s_[k] - '0');
            utf8_append(out, cp);
          } else {
            // Python keeps unknown escapes verbatim.
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t;
    t.type = Tok::String;
    t.text = std::move(out);
    t.line = start_line;
    toks_.push_back(std::move(t));
    return k + 1;
  }

  size_t lex_number(size_t p) {
    size_t q = p;
    auto digits = [&] {
      while (q < s_.size() && (is_digit(s_[q]) || (s_[q] == '_' && q + 1 < s_.size() && is_digit(s_[q + 1])))) ++q;
    };
    digits();
    bool is_float = false;
    // `x.0.1` is attribute access, not a float: jinja2's float rule has a (?<!\.) lookbehind.
    const bool after_dot = p > 0 && s_[p - 1] == '.';
    if (!after_dot && q + 1 < s_.size() && s_[q] == '.' && is_digit(s_[q + 1])) {
      is_float = true;
      ++q;
      digits();
    }
    if (!after_dot && q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
      size_t r = q + 1;
      if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
      if (r < s_.size() && is_digit(s_[r])) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t k = p; k < q; ++k)
      if (s_[k] != '_') text.push_back(s_[k]);
    Token t;
    t.line = line_;
    if (is_float) {
      t.type = Tok::Float;
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Tok::Int;
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) lex_fail("integer literal too large", line_);
      t.ival = v;
    }
    t.text = std::move(text);
    toks_.push_back(std::move(t));
    return q;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opts) {
  // jinja2 normalizes \r\n and \r to \n and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src.push_back('\n');
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src.push_back(source[k]);
    }
  }
  if (!opts.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), opts).run();
}

}  // namespace tessera::text::tpl
