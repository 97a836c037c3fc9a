// Tree-walking evaluator of a parsed template. Internal to the template library: filters,
// tests and Python methods (builtins.cpp, filters.cpp) are implemented against this class.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/template/ast.h"
#include "text/template/limits.h"
#include "text/template/value.h"

namespace tessera::text::tpl {

// A variable scope. jinja2 gives the template, every for-loop body and every macro call its own
// scope; `if` blocks share their parent's.
struct Scope : Object {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find_local(std::string_view name);
  Value* find(std::string_view name);
  void set(const std::string& name, Value v);
};

// Evaluated call arguments.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `index` by position, else by keyword `name`, else `def`.
  Value get(size_t index, const char* name, Value def = Value::undefined()) const;
  bool has(size_t index, const char* name) const;
};

class Interpreter {
 public:
  Interpreter(Heap& heap, const Limits& limits) : heap_(heap), limits_(limits) {}

  // Renders `body` in `scope` and returns the text.
  std::string render(const Body& body, Scope* scope);

  Value eval(const Expr& e, Scope* s);
  Value call(const Value& callee, Args& args, int line);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& v, Args& args);
  bool apply_test(const std::string& name, const Value& v, Args& args);
  // Python iteration: list items, dict keys, string characters; Undefined is empty.
  std::vector<Value> iterate(const Value& v);

  Heap& heap() { return heap_; }
  const Limits& limits() const { return limits_; }
  [[noreturn]] void fail_undefined(const Value& v);

 private:
  enum class Flow { Normal, Break, Continue };

  struct DepthGuard {
    Interpreter& in;
    explicit DepthGuard(Interpreter& i);
    ~DepthGuard() { --in.depth_; }
  };

  Flow exec_body(const Body& body, Scope* s, std::string& out);
  Flow exec(const Stmt& st, Scope* s, std::string& out);
  void exec_for(const Stmt& st, Scope* s, std::string& out);
  void exec_set(const Stmt& st, Scope* s);
  void assign(const Target& t, const Value& v, Scope* s);
  void append_out(std::string& out, std::string_view text);
  Value call_macro(CallableObj* m, Args& args);
  Value eval_binary(const Expr& e, Scope* s);
  Value eval_compare(const Expr& e, Scope* s);
  Value eval_slice(const Expr& e, Scope* s);
  void eval_args(const Expr& e, Scope* s, Args& args);
  Scope* new_scope(Scope* parent);

  Heap& heap_;
  Limits limits_;
  int depth_ = 0;
};

// Builtins (builtins.cpp): globals, Python methods, the `in` operator and arithmetic.
Value call_global(Interpreter& in, const std::string& name, Args& args);
bool is_method(const Value& self, const std::string& name);
Value call_method(Interpreter& in, const Value& self, const std::string& name, Args& args);
bool contains(Interpreter& in, const Value& container, const Value& item);
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
// Python slice of a list/tuple/str.
Value slice_value(Interpreter& in, const Value& v, const Value& start, const Value& stop, const Value& step);
// Names of filters and tests, checked at parse time like jinja2's compiler does.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace tessera::text::tpl
