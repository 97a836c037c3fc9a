// Splits template source into tokens with jinja2's lexer rules under HF's settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline=False): the whitespace a template renders
// is decided here, so this mirrors jinja2/lexer.py rule for rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text::tpl {

enum class Tok : uint8_t {
  Data,        // literal template text (after whitespace control)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,
  Int,
  Float,
  Op,  // operator or punctuation, text in `text`
  Eof,
};

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // Data text, name, decoded string literal, operator
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError ("... (line N)") on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexOptions& opts = {});

}  // namespace tessera::text::tpl
