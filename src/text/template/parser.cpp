#include "text/template/parser.h"

#include <algorithm>
#include <initializer_list>

#include "text/template/error.h"
#include "text/template/interpreter.h"

namespace tessera::text::tpl {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_depth) : t_(std::move(toks)), max_depth_(max_depth) {}

  TemplateAst run() {
    TemplateAst ast;
    std::string which;
    ast.body = parse_body({}, &which);
    return ast;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_) p.fail("template is nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  [[noreturn]] void fail(const std::string& msg) const {
    throw TemplateError("TemplateSyntaxError: " + msg + " (line " + std::to_string(cur().line) + ")");
  }

  const Token& cur() const { return t_[p_]; }
  const Token& look(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Eof:
        return "end of template";
      case Tok::VarEnd:
        return "end of print statement";
      case Tok::BlockEnd:
        return "end of statement block";
      case Tok::Data:
        return "template data";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  ExprPtr make(ExprKind k) { return std::make_unique<Expr>(k, cur().line); }

  // Sets e's depth from its children's and refuses a tree deeper than the limit. Loops build
  // left-deep trees without recursing (`x|f|f|f...`, `a+b+c...`, `a.b.c...`), so the parser's own
  // recursion guard does not see them: every node built with children passes through here.
  ExprPtr sealed(ExprPtr e) {
    int d = 0;
    auto see = [&d](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->a);
    see(e->star_args);
    see(e->star_kwargs);
    for (const auto& c : e->items) see(c);
    for (const auto& c : e->keys) see(c);
    for (const auto& kv : e->kwargs) see(kv.second);
    e->depth = d + 1;
    if (e->depth > max_depth_)
      fail("expression is nested too deeply (more than " + std::to_string(max_depth_) +
           " levels of operators, filters, attributes or calls)");
    return e;
  }

  // ---- statements -----------------------------------------------------------------------------

  Body parse_body(std::initializer_list<const char*> ends, std::string* which) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& tk = cur();
      if (tk.type == Tok::Eof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("Unexpected end of template. Jinja was looking for the following tags: " + want);
      }
      if (tk.type == Tok::Data) {
        auto s = std::make_unique<Stmt>(StmtKind::Data, tk.line);
        s->text = tk.text;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>(StmtKind::Output, tk.line);
        s->expr = parse_tuple(true, false, nullptr);
        if (cur().type != Tok::VarEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tk.type == Tok::BlockBegin) {
        next();
        if (cur().type != Tok::Name) fail("tag name expected");
        for (const char* e : ends) {
          if (cur().text == e) {
            *which = e;
            next();
            return body;
          }
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tk));
      }
    }
  }

  StmtPtr parse_statement() {
    const std::string tag = cur().text;
    const int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "with") return parse_with(line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      expect_block_end();
      return std::make_unique<Stmt>(tag == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    static const char* kUnsupported[] = {"include", "import", "from", "extends", "block", "do", "autoescape", "trans"};
    for (const char* u : kUnsupported)
      if (tag == u) fail("tag '" + tag + "' is not supported in chat templates");
    fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if(int line) {
    DepthGuard g(*this);  // an elif chain recurses here
    auto s = std::make_unique<Stmt>(StmtKind::If, line);
    s->expr = parse_tuple(false, false, nullptr);
    expect_block_end();
    std::string which;
    s->body = parse_body({"elif", "else", "endif"}, &which);
    if (which == "elif") {
      s->else_body.push_back(parse_if(cur().line));
      return s;  // the nested if consumed the endif
    }
    if (which == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, &which);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::For, line);
    s->target = parse_target(false, true);
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false, "recursive");
    if (skip_name("if")) s->cond = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    std::string which;
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"}, &which);
    --loop_depth_;
    if (which == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &which);
    }
    expect_block_end();
    return s;
  }

  Target parse_target(bool allow_attr, bool allow_tuple) {
    Target first = parse_single_target(allow_attr);
    if (!allow_tuple || !is_op(",")) return first;
    Target t;
    t.kind = Target::Kind::Tuple;
    t.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_name("in") || is_op("=") || cur().type == Tok::BlockEnd) break;
      t.items.push_back(parse_single_target(allow_attr));
    }
    return t;
  }

  Target parse_single_target(bool allow_attr) {
    DepthGuard g(*this);
    Target t;
    if (skip_op("(")) {
      t = parse_target(allow_attr, true);
      if (t.kind != Target::Kind::Tuple) {
        Target tup;
        tup.kind = Target::Kind::Tuple;
        tup.items.push_back(std::move(t));
        t = std::move(tup);
      }
      expect_op(")");
      return t;
    }
    t.name = expect_name();
    if (allow_attr && skip_op(".")) {
      t.kind = Target::Kind::Attr;
      t.attr = expect_name();
    }
    return t;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true, true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(StmtKind::Set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(true, false, nullptr);
      expect_block_end();
      return s;
    }
    if (target.kind != Target::Kind::Name) fail("expected '='");
    auto s = std::make_unique<Stmt>(StmtKind::SetBlock, line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect_block_end();
    std::string which;
    s->body = parse_body({"endset"}, &which);
    expect_block_end();
    return s;
  }

  std::unique_ptr<MacroStmt> parse_signature(std::string name) {
    auto m = std::make_unique<MacroStmt>();
    m->name = std::move(name);
    expect_op("(");
    while (!is_op(")")) {
      if (!m->params.empty()) expect_op(",");
      if (is_op(")")) break;
      m->params.push_back(expect_name());
      if (skip_op("=")) {
        m->defaults.push_back(parse_expression(true));
      } else if (!m->defaults.empty()) {
        fail("non-default argument follows default argument");
      }
    }
    expect_op(")");
    return m;
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::Macro, line);
    s->macro = parse_signature(expect_name());
    expect_block_end();
    std::string which;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = parse_body({"endmacro"}, &which);
    loop_depth_ = saved;
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::CallBlock, line);
    if (is_op("(")) {
      s->macro = parse_signature("caller");
    } else {
      s->macro = std::make_unique<MacroStmt>();
      s->macro->name = "caller";
    }
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail("expected call");
    expect_block_end();
    std::string which;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = parse_body({"endcall"}, &which);
    loop_depth_ = saved;
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::FilterBlock, line);
    s->filter = parse_filter_chain(nullptr, /*start_inline=*/true);
    expect_block_end();
    std::string which;
    s->body = parse_body({"endfilter"}, &which);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::With, line);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target t = parse_single_target(false);
      expect_op("=");
      s->assigns.emplace_back(std::move(t), parse_expression(true));
    }
    expect_block_end();
    std::string which;
    s->body = parse_body({"endwith"}, &which);
    expect_block_end();
    return s;
  }

  // ---- expressions ----------------------------------------------------------------------------

  bool is_tuple_end(const char* extra_end) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || cur().type == Tok::Eof) return true;
    if (is_op(")")) return true;
    if (extra_end && is_name(extra_end)) return true;
    return false;
  }

  // Comma-separated expressions; a tuple when there is a comma.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, const char* extra_end) {
    DepthGuard g(*this);
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("Expected an expression, got " + describe(cur()));
    }
    auto e = std::make_unique<Expr>(ExprKind::Tuple, line);
    e->items = std::move(args);
    return sealed(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = make(ExprKind::Cond);
      next();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_condexpr();
      c->items.push_back(std::move(e));
      c->items.push_back(std::move(test));
      c->items.push_back(std::move(otherwise));
      e = sealed(std::move(c));
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = make(ExprKind::Binary);
    e->name = op;
    e->a = std::move(l);
    e->items.push_back(std::move(r));
    return sealed(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (skip_name("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (skip_name("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }

  ExprPtr parse_not() {
    DepthGuard g(*this);
    if (is_name("not")) {
      auto e = make(ExprKind::Not);
      next();
      e->a = parse_not();
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? sealed(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (skip_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (skip_op("**")) e = binary("**", std::move(e), parse_unary(true));
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(is_op("-") ? ExprKind::Neg : ExprKind::Pos);
      next();
      e->a = parse_unary(false);
      e = sealed(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard g(*this);
    const Token& tk = cur();
    if (tk.type == Tok::Name) {
      auto e = make(ExprKind::Const);
      const std::string& n = tk.text;
      if (n == "true" || n == "True") {
        e->value = Value::boolean(true);
      } else if (n == "false" || n == "False") {
        e->value = Value::boolean(false);
      } else if (n == "none" || n == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::Name;
        e->name = n;
      }
      next();
      return e;
    }
    if (tk.type == Tok::String) {
      // Adjacent string literals concatenate, as in Python.
      std::string s;
      auto e = make(ExprKind::Const);
      while (cur().type == Tok::String) {
        s += cur().text;
        next();
      }
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tk.type == Tok::Int || tk.type == Tok::Float) {
      auto e = make(ExprKind::Const);
      e->value = tk.type == Tok::Int ? Value::integer(tk.ival) : Value::number(tk.fval);
      next();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, true, nullptr);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprKind::List);
      next();
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return sealed(std::move(e));
    }
    if (is_op("{")) {
      auto e = make(ExprKind::Dict);
      next();
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->keys.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return sealed(std::move(e));
    }
    fail("unexpected " + describe(tk));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    DepthGuard g(*this);
    if (skip_op(".")) {
      if (cur().type == Tok::Name) {
        auto e = make(ExprKind::GetAttr);
        e->a = std::move(obj);
        e->name = cur().text;
        next();
        return sealed(std::move(e));
      }
      if (cur().type == Tok::Int) {
        auto e = make(ExprKind::GetItem);
        e->a = std::move(obj);
        auto idx = make(ExprKind::Const);
        idx->value = Value::integer(cur().ival);
        next();
        e->items.push_back(std::move(idx));
        return sealed(std::move(e));
      }
      fail("expected name or number after '.'");
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    ExprPtr single_slice;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      if (is_op("]")) break;
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail("expected subscript");
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      for (const auto& a : args)
        if (a->kind == ExprKind::Slice) fail("slices inside a tuple subscript are not supported");
      index = make(ExprKind::Tuple);
      index->items = std::move(args);
      index = sealed(std::move(index));
    }
    if (index->kind == ExprKind::Slice) {
      index->a = std::move(obj);
      return sealed(std::move(index));
    }
    auto e = make(ExprKind::GetItem);
    e->a = std::move(obj);
    e->items.push_back(std::move(index));
    return sealed(std::move(e));
  }

  // One subscript: an expression or a slice `a:b:c` (any part optional).
  ExprPtr parse_subscribed() {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    auto s = make(ExprKind::Slice);
    next();  // ':'
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    s->items.push_back(std::move(start));
    s->items.push_back(std::move(stop));
    s->items.push_back(std::move(step));
    return sealed(std::move(s));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (skip_op("*")) {
        e.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        e.star_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument follows keyword argument");
        e.items.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard g(*this);
    auto e = make(ExprKind::Call);
    e->a = std::move(callee);
    parse_call_args(*e);
    return sealed(std::move(e));
  }

  // `| name(args) | name2 ...` starting at '|' (or at the name for {% filter %}).
  ExprPtr parse_filter_chain(ExprPtr e, bool start_inline = false) {
    DepthGuard g(*this);
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto f = make(ExprKind::Filter);
      f->name = expect_name();
      while (is_op(".") && look().type == Tok::Name) {
        next();
        f->name += "." + expect_name();
      }
      // jinja2 resolves filter names when compiling, so an unknown one fails the whole template.
      if (!is_known_filter(f->name)) fail("No filter named '" + f->name + "'.");
      f->a = std::move(e);
      if (is_op("(")) parse_call_args(*f);
      e = sealed(std::move(f));
    }
    return e;
  }

  ExprPtr parse_test(ExprPtr e) {
    DepthGuard g(*this);
    next();  // 'is'
    auto t = make(ExprKind::Test);
    t->negated = skip_name("not");
    t->name = expect_name();
    while (is_op(".") && look().type == Tok::Name) {
      next();
      t->name += "." + expect_name();
    }
    if (!is_known_test(t->name)) fail("No test named '" + t->name + "'.");
    t->a = std::move(e);
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      ExprPtr arg = parse_primary();
      t->items.push_back(parse_postfix(std::move(arg)));
    }
    return sealed(std::move(t));
  }
};

}  // namespace

TemplateAst parse_template(std::string_view source, const LexOptions& lex, int max_depth) {
  return Parser(tokenize(source, lex), max_depth).run();
}

}  // namespace tessera::text::tpl
