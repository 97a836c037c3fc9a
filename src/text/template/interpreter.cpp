#include "text/template/interpreter.h"

#include "text/template/error.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {

Value* Scope::find_local(std::string_view name) {
  for (auto& [k, v] : vars)
    if (k == name) return &v;
  return nullptr;
}

Value* Scope::find(std::string_view name) {
  for (Scope* s = this; s; s = s->parent)
    if (Value* v = s->find_local(name)) return v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  if (Value* slot = find_local(name)) {
    *slot = std::move(v);
  } else {
    vars.emplace_back(name, std::move(v));
  }
}

Value Args::get(size_t index, const char* name, Value def) const {
  if (index < pos.size()) return pos[index];
  if (name)
    for (const auto& [k, v] : kw)
      if (k == name) return v;
  return def;
}

bool Args::has(size_t index, const char* name) const {
  if (index < pos.size()) return true;
  if (name)
    for (const auto& [k, v] : kw)
      if (k == name) return true;
  return false;
}

Interpreter::DepthGuard::DepthGuard(Interpreter& i) : in(i) {
  // Python's recursion limit plays this role for jinja2.
  if (++in.depth_ > in.limits_.max_depth * 4)
    throw TemplateError("RecursionError: maximum recursion depth exceeded while rendering");
}

void Interpreter::fail_undefined(const Value& v) {
  throw TemplateError("UndefinedError: " + (v.s.empty() ? std::string("value is undefined") : v.s));
}

Scope* Interpreter::new_scope(Scope* parent) {
  Scope* s = heap_.make<Scope>();
  s->parent = parent;
  return s;
}

std::string Interpreter::render(const Body& body, Scope* scope) {
  std::string out;
  exec_body(body, scope, out);
  return out;
}

void Interpreter::append_out(std::string& out, std::string_view text) {
  heap_.charge(1 + text.size() / 64);
  if (out.size() + text.size() > limits_.max_output_bytes)
    throw TemplateError("template output exceeds the size limit");
  out.append(text);
}

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope* s, std::string& out) {
  for (const auto& st : body) {
    Flow f = exec(*st, s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& st, Scope* s, std::string& out) {
  DepthGuard g(*this);
  heap_.charge(1);
  switch (st.kind) {
    case StmtKind::Data:
      append_out(out, st.text);
      return Flow::Normal;
    case StmtKind::Output: {
      Value v = eval(*st.expr, s);
      if (v.kind == Kind::String) {
        append_out(out, v.s);
      } else {
        append_out(out, py_str(v, &heap_));
      }
      return Flow::Normal;
    }
    case StmtKind::If:
      if (truthy(eval(*st.expr, s))) return exec_body(st.body, s, out);
      return exec_body(st.else_body, s, out);
    case StmtKind::For:
      exec_for(st, s, out);
      return Flow::Normal;
    case StmtKind::Set:
      exec_set(st, s);
      return Flow::Normal;
    case StmtKind::SetBlock: {
      std::string text;
      Scope* inner = new_scope(s);
      exec_body(st.body, inner, text);
      Value v = Value::string(std::move(text));
      if (st.filter) {
        // The filter chain was parsed with a null innermost operand: feed the block text in.
        std::vector<const Expr*> chain;
        for (const Expr* f = st.filter.get(); f; f = f->a.get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          Args args;
          eval_args(**it, s, args);
          v = apply_filter((*it)->name, v, args);
        }
      }
      s->set(st.target.name, std::move(v));
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      std::string text;
      exec_body(st.body, s, text);
      Value v = Value::string(std::move(text));
      std::vector<const Expr*> chain;
      for (const Expr* f = st.filter.get(); f; f = f->a.get()) chain.push_back(f);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        Args args;
        eval_args(**it, s, args);
        v = apply_filter((*it)->name, v, args);
      }
      append_out(out, py_str(v, &heap_));
      return Flow::Normal;
    }
    case StmtKind::Macro: {
      auto* m = heap_.make<CallableObj>();
      m->type = CallableObj::Type::Macro;
      m->name = st.macro->name;
      m->macro = st.macro.get();
      m->closure = s;
      s->set(st.macro->name, Value::object(Kind::Callable, m));
      return Flow::Normal;
    }
    case StmtKind::CallBlock: {
      auto* caller = heap_.make<CallableObj>();
      caller->type = CallableObj::Type::Macro;
      caller->name = "caller";
      caller->macro = st.macro.get();
      caller->closure = s;
      const Expr& call_expr = *st.expr;
      Value callee = eval(*call_expr.a, s);
      Args args;
      eval_args(call_expr, s, args);
      if (CallableObj* c = callee.callable(); c && c->type == CallableObj::Type::Macro) {
        // Bind `caller` for this one call without mutating the shared macro object.
        auto* bound = heap_.make<CallableObj>();
        *bound = *c;
        bound->caller = Value::object(Kind::Callable, caller);
        callee = Value::object(Kind::Callable, bound);
      }
      append_out(out, py_str(call(callee, args, st.line), &heap_));
      return Flow::Normal;
    }
    case StmtKind::With: {
      Scope* inner = new_scope(s);
      for (const auto& [t, e] : st.assigns) assign(t, eval(*e, s), inner);
      return exec_body(st.body, inner, out);
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const Stmt& st, Scope* s, std::string& out) {
  Value iterable = eval(*st.expr, s);
  std::vector<Value> items = iterate(iterable);
  Scope* inner = new_scope(s);
  if (st.cond) {
    // jinja2 filters before the loop starts, so loop.length counts only the kept items.
    std::vector<Value> kept;
    for (auto& v : items) {
      inner->vars.clear();
      assign(st.target, v, inner);
      if (truthy(eval(*st.cond, inner))) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(st.else_body, s, out);
    return;
  }
  auto* loop = heap_.make<LoopObj>();
  Value list = heap_.new_list(std::move(items));
  loop->items = list.list();
  Value loop_value = Value::object(Kind::Loop, loop);
  // loop.depth counts recursion levels of `recursive` loops only, so it is 1 here even when nested.
  const size_t n = loop->items->items.size();
  for (size_t k = 0; k < n; ++k) {
    heap_.charge(1);
    loop->index0 = static_cast<int64_t>(k);
    // A fresh scope per iteration, as jinja2's loop body does not carry `set`s over.
    inner->vars.clear();
    inner->vars.emplace_back("loop", loop_value);
    assign(st.target, loop->items->items[k], inner);
    Flow f = exec_body(st.body, inner, out);
    if (f == Flow::Break) break;
  }
}

void Interpreter::assign(const Target& t, const Value& v, Scope* s) {
  switch (t.kind) {
    case Target::Kind::Name:
      s->set(t.name, v);
      return;
    case Target::Kind::Attr: {
      Value* ns = s->find(t.name);
      if (!ns || ns->kind != Kind::Namespace)
        throw TemplateError("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      ns->dict()->set(Value::string(t.attr), v);
      return;
    }
    case Target::Kind::Tuple: {
      std::vector<Value> items = iterate(v);
      if (items.size() != t.items.size()) {
        throw TemplateError(items.size() > t.items.size()
                                ? "ValueError: too many values to unpack (expected " + std::to_string(t.items.size()) +
                                      ")"
                                : "ValueError: not enough values to unpack (expected " +
                                      std::to_string(t.items.size()) + ", got " + std::to_string(items.size()) + ")");
      }
      for (size_t k = 0; k < items.size(); ++k) assign(t.items[k], items[k], s);
      return;
    }
  }
}

void Interpreter::exec_set(const Stmt& st, Scope* s) { assign(st.target, eval(*st.expr, s), s); }

std::vector<Value> Interpreter::iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      heap_.charge(v.list()->items.size());
      return v.list()->items;
    case Kind::Dict: {
      std::vector<Value> keys;
      heap_.charge(v.dict()->entries.size());
      for (const auto& [k, x] : v.dict()->entries) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      heap_.charge(v.s.size());
      heap_.ensure_room(v.s.size() * sizeof(Value));  // a Value per character
      for (size_t p = 0; p < v.s.size();) {
        size_t start = p;
        utf8_next(v.s, p);
        chars.push_back(Value::string(v.s.substr(start, p - start)));
      }
      return chars;
    }
    default:
      throw TemplateError(std::string("TypeError: '") + type_name(v) + "' object is not iterable");
  }
}

void Interpreter::eval_args(const Expr& e, Scope* s, Args& args) {
  for (const auto& a : e.items) args.pos.push_back(eval(*a, s));
  if (e.star_args) {
    for (auto& v : iterate(eval(*e.star_args, s))) args.pos.push_back(std::move(v));
  }
  for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a, s));
  if (e.star_kwargs) {
    Value d = eval(*e.star_kwargs, s);
    if (!d.is_mapping()) throw TemplateError("TypeError: argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict()->entries) args.kw.emplace_back(py_str(k, &heap_), v);
  }
}

Value Interpreter::eval(const Expr& e, Scope* s) {
  DepthGuard g(*this);
  heap_.charge(1);
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name: {
      if (Value* v = s->find(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      uint64_t bytes = 0;
      for (const auto& x : e.items) {
        items.push_back(eval(*x, s));
        bytes += Heap::value_bytes(items.back());
        heap_.ensure_room(bytes);
      }
      return heap_.new_list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      Value d = heap_.new_dict();
      for (size_t k = 0; k < e.items.size(); ++k) {
        Value key = eval(*e.keys[k], s);
        if (!hashable(key)) throw TemplateError(std::string("TypeError: unhashable type: '") + type_name(key) + "'");
        heap_.charge(d.dict()->entries.size() / 8);
        Value v = eval(*e.items[k], s);
        heap_.charge_bytes(Heap::value_bytes(key) + Heap::value_bytes(v));
        d.dict()->set(key, std::move(v));
      }
      return d;
    }
    case ExprKind::GetAttr:
      return get_attr(eval(*e.a, s), e.name);
    case ExprKind::GetItem:
      return get_item(eval(*e.a, s), eval(*e.items[0], s));
    case ExprKind::Slice:
      return eval_slice(e, s);
    case ExprKind::Call: {
      Value callee = eval(*e.a, s);
      Args args;
      eval_args(e, s, args);
      return call(callee, args, e.line);
    }
    case ExprKind::Filter: {
      Value v = e.a ? eval(*e.a, s) : Value::undefined();
      Args args;
      eval_args(e, s, args);
      return apply_filter(e.name, v, args);
    }
    case ExprKind::Test: {
      Value v = eval(*e.a, s);
      Args args;
      eval_args(e, s, args);
      bool r = apply_test(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*e.a, s)));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.a, s);
      if (v.is_undefined()) fail_undefined(v);
      if (v.kind == Kind::Float) return Value::number(e.kind == ExprKind::Neg ? -v.f : v.f);
      if (v.is_int()) {
        int64_t x = v.as_int();
        if (e.kind == ExprKind::Pos) return Value::integer(x);
        if (x == INT64_MIN) throw TemplateError("OverflowError: integer too large");
        return Value::integer(-x);
      }
      throw TemplateError(std::string("TypeError: bad operand type for unary ") +
                          (e.kind == ExprKind::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case ExprKind::Binary:
      return eval_binary(e, s);
    case ExprKind::Compare:
      return eval_compare(e, s);
    case ExprKind::Cond: {
      if (truthy(eval(*e.items[1], s))) return eval(*e.items[0], s);
      if (e.items[2]) return eval(*e.items[2], s);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
  }
  return Value::undefined();
}

Value Interpreter::eval_binary(const Expr& e, Scope* s) {
  Value a = eval(*e.a, s);
  if (e.name == "and") return truthy(a) ? eval(*e.items[0], s) : a;
  if (e.name == "or") return truthy(a) ? a : eval(*e.items[0], s);
  Value b = eval(*e.items[0], s);
  return binary_op(*this, e.name, a, b);
}

Value Interpreter::eval_compare(const Expr& e, Scope* s) {
  Value left = eval(*e.a, s);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.items[k], s);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==") {
      r = py_equal(left, right, &heap_);
    } else if (op == "!=") {
      r = !py_equal(left, right, &heap_);
    } else if (op == "in") {
      r = contains(*this, right, left);
    } else if (op == "not in") {
      r = !contains(*this, right, left);
    } else {
      int c = py_compare(left, right, &heap_);
      r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const Expr& e, Scope* s) {
  Value obj = eval(*e.a, s);
  auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k], s) : Value::none(); };
  Value start = part(0), stop = part(1), step = part(2);
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.kind != Kind::List && obj.kind != Kind::String) return Value::undefined("value is not sliceable");
  return slice_value(*this, obj, start, stop, step);
}

Value Interpreter::call(const Value& callee, Args& args, int line) {
  (void)line;
  switch (callee.kind) {
    case Kind::Undefined:
      fail_undefined(callee);
    case Kind::Callable: {
      CallableObj* c = callee.callable();
      switch (c->type) {
        case CallableObj::Type::Macro:
          return call_macro(c, args);
        case CallableObj::Type::Method:
          return call_method(*this, c->self, c->name, args);
        case CallableObj::Type::Builtin:
          return call_global(*this, c->name, args);
      }
      break;
    }
    default:
      break;
  }
  throw TemplateError(std::string("TypeError: '") + type_name(callee) + "' object is not callable");
}

Value Interpreter::call_macro(CallableObj* m, Args& args) {
  DepthGuard g(*this);
  const MacroStmt& mac = *m->macro;
  Scope* scope = new_scope(m->closure);
  const size_t np = mac.params.size();
  const size_t first_default = np - mac.defaults.size();
  std::vector<Value> extra;
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < np) {
      scope->set(mac.params[k], args.pos[k]);
    } else {
      extra.push_back(args.pos[k]);
    }
  }
  Value kwargs = heap_.new_dict();
  for (const auto& [k, v] : args.kw) {
    bool is_param = false;
    for (size_t p = 0; p < np; ++p) {
      if (mac.params[p] == k) {
        if (p < args.pos.size())
          throw TemplateError("TypeError: macro '" + mac.name + "' got multiple values for argument '" + k + "'");
        scope->set(k, v);
        is_param = true;
      }
    }
    if (!is_param) kwargs.dict()->set(Value::string(k), v);
  }
  for (size_t p = args.pos.size(); p < np; ++p) {
    if (scope->find_local(mac.params[p])) continue;
    if (p >= first_default) {
      scope->set(mac.params[p], eval(*mac.defaults[p - first_default], scope));
    } else {
      scope->set(mac.params[p], Value::undefined("parameter '" + mac.params[p] + "' was not provided"));
    }
  }
  scope->set("varargs", heap_.new_list(std::move(extra)));
  scope->set("kwargs", kwargs);
  if (!m->caller.is_undefined()) scope->set("caller", m->caller);
  std::string out;
  exec_body(mac.body, scope, out);
  return Value::string(std::move(out));
}

}  // namespace tessera::text::tpl
