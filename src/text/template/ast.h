// Syntax tree of a parsed template. Nodes are immutable after parsing; one parsed template can be
// rendered many times, concurrently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/template/value.h"

namespace tessera::text::tpl {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Const,    // literal in `value`
  Name,     // `name`
  List,     // [items]
  Tuple,    // (items)
  Dict,     // {keys[i]: items[i]}
  GetAttr,  // a.name
  GetItem,  // a[b]
  Slice,    // a[b:c:d] (items: start, stop, step; null = omitted)
  Call,     // a(args, kw=...)
  Filter,   // a | name(args)   (a null inside {% filter %} blocks)
  Test,     // a is [not] name(args)
  Not,
  Neg,
  Pos,
  Binary,   // op in `name`: + - * / // % ** ~ and or
  Compare,  // a op b op c ... (ops in `ops`, operands in items)
  Cond,     // items[0] if items[1] else items[2] (else may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                                          // Const
  std::string name;                                     // Name, GetAttr attr, Filter/Test name, Binary op
  ExprPtr a;                                            // operand / object / callee
  std::vector<ExprPtr> items;                           // list/tuple items, dict values, call args, slice parts, ...
  std::vector<ExprPtr> keys;                            // dict keys
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call/filter/test keyword arguments
  ExprPtr star_args, star_kwargs;                       // *args, **kwargs
  std::vector<std::string> ops;                         // Compare operators
  bool negated = false;                                 // Test: `is not`
  // Nodes on the longest path down from this one (1 for a leaf): the parser refuses trees deeper
  // than its limit, so evaluating or destroying one (both recursive) cannot overflow the stack.
  int depth = 1;

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

enum class StmtKind {
  Data,      // literal text
  Output,    // {{ expr }}
  If,        // if expr: body else: else_body (elif chains nest in else_body)
  For,       // for target in expr [if cond]: body else: else_body
  Set,       // set target = expr
  SetBlock,  // set name [| filter] %} body {% endset
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Break,
  Continue,
};

// Assignment targets: a name, a namespace attribute (ns.x), or a tuple of targets.
struct Target {
  enum class Kind { Name, Attr, Tuple } kind = Kind::Name;
  std::string name;  // Name; Attr: the namespace variable
  std::string attr;  // Attr
  std::vector<Target> items;
};

struct MacroStmt;

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // Data
  ExprPtr expr;      // Output/If/For iterable/Set value/CallBlock call
  ExprPtr cond;      // For filter
  ExprPtr filter;    // SetBlock/FilterBlock: Filter chain applied to the block output
  Target target;
  Body body, else_body;
  std::unique_ptr<MacroStmt> macro;                 // Macro, and the caller of CallBlock
  std::vector<std::pair<Target, ExprPtr>> assigns;  // With
  bool recursive = false;

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

struct MacroStmt {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last params
  Body body;
  bool uses_caller = false;  // the body mentions `caller`
};

struct TemplateAst {
  Body body;
};

}  // namespace tessera::text::tpl
