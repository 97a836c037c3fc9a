// Recursive-descent parser from tokens to the syntax tree, following jinja2/parser.py's grammar
// and operator precedence (including its quirks, e.g. `-2**2` is `(-2)**2`).
#pragma once

#include <string_view>

#include "text/template/ast.h"
#include "text/template/lexer.h"

namespace tessera::text::tpl {

// Throws TemplateError ("TemplateSyntaxError: ... (line N)"). `max_depth` bounds nesting so that
// hostile input cannot overflow the stack.
TemplateAst parse_template(std::string_view source, const LexOptions& lex, int max_depth);

}  // namespace tessera::text::tpl
