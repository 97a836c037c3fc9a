// The dynamic value type of the template interpreter, with Python semantics: templates are written
// against jinja2, so truthiness, equality, ordering and str()/repr() must match CPython's.
//
// Containers, namespaces, macros and scopes live in a per-render Heap and values point into it.
// That keeps values cheap to copy, lets templates mutate lists in place (list.append), and frees
// reference cycles (a list appended to itself) when the render ends instead of leaking them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/template/limits.h"

namespace tessera::text::tpl {

struct Object {
  virtual ~Object() = default;
};

enum class Kind : uint8_t {
  Undefined,  // jinja2 Undefined: prints as "", falsy, iterates as empty, fails on use
  None,
  Bool,
  Int,
  Float,
  String,
  List,  // list, or tuple when ListObj::tuple
  Dict,
  Namespace,  // jinja2 namespace(): a dict whose attributes can be assigned
  Callable,   // macro, builtin function, bound method
  Loop,       // the `loop` variable of a for loop
};

struct ListObj;
struct DictObj;
struct CallableObj;
struct LoopObj;

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  Object* obj = nullptr;
  // The string for Kind::String; for Kind::Undefined the reason used in error messages
  // (e.g. "'foo' is undefined").
  std::string s;

  static Value undefined(std::string why = {}) {
    Value v;
    v.s = std::move(why);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
  }
  static Value object(Kind k, Object* o) {
    Value v;
    v.kind = k;
    v.obj = o;
    return v;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }

  ListObj* list() const;
  DictObj* dict() const;  // Dict and Namespace
  CallableObj* callable() const;
  LoopObj* loop() const;
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }
};

struct ListObj : Object {
  std::vector<Value> items;
  bool tuple = false;
};

struct MacroStmt;
struct Scope;

// Macros, builtin functions and bound methods (`s.split` before the call).
struct CallableObj : Object {
  enum class Type { Macro, Builtin, Method } type = Type::Builtin;
  std::string name;
  const MacroStmt* macro = nullptr;  // Type::Macro
  Scope* closure = nullptr;          // Type::Macro: the scope the macro was defined in
  Value caller;                      // Type::Macro: the `caller` of a {% call %} block
  Value self;                        // Type::Method: the receiver
};

// The `loop` variable: attributes are computed from the position.
struct LoopObj : Object {
  ListObj* items = nullptr;
  int64_t index0 = 0;
  int64_t depth0 = 0;
  Value changed_last;
  bool changed_seen = false;
};

struct DictObj : Object {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, like Python dicts
  // Returns the value for `key` or nullptr. Keys compare with Python equality (1 == 1.0 == True).
  Value* find(const Value& key);
  Value* find(std::string_view key);
  void set(const Value& key, Value v);
  bool erase(const Value& key);
};

// Tracks the work and memory of one render so that no template can hang or exhaust memory.
class Heap {
 public:
  explicit Heap(const Limits& limits) : limits_(limits) {}
  template <class T>
  T* make() {
    charge(8);
    if (objects_.size() >= limits_.max_objects) fail_limit("too many objects allocated");
    auto p = std::make_unique<T>();
    T* raw = p.get();
    objects_.push_back(std::move(p));
    return raw;
  }
  Value new_list(std::vector<Value> items = {}, bool tuple = false);
  Value new_dict();
  // Counts `n` units of work against Limits::max_steps (one unit per node evaluated, and per
  // element or ~16 bytes touched by bulk operations).
  void charge(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps) fail_limit("template exceeded its step limit");
  }
  void check_string(size_t n) const {
    if (n > limits_.max_string_bytes) fail_limit("template built a string over the size limit");
  }
  // Counts `n` bytes built (a string, list items, dict entries) against Limits::max_memory_bytes.
  void charge_bytes(uint64_t n) {
    ensure_room(n);
    bytes_ += n;
  }
  // Fails, without counting, when `n` more bytes would exceed the budget: for producers that know
  // their size before they build it (range, split, repeat), so the memory is never taken.
  void ensure_room(uint64_t n) const {
    if (n > limits_.max_memory_bytes || bytes_ > limits_.max_memory_bytes - n) fail_memory(n);
  }
  // A string result of `n` bytes: under the single-string limit and counted.
  void charge_string(size_t n) {
    check_string(n);
    charge_bytes(n);
  }
  // What a Value holding `v` costs in a list or dict.
  static uint64_t value_bytes(const Value& v) { return sizeof(Value) + (v.kind == Kind::String ? v.s.size() : 0); }
  uint64_t bytes_charged() const { return bytes_; }
  const Limits& limits() const { return limits_; }
  [[noreturn]] static void fail_limit(const std::string& what);

 private:
  [[noreturn]] void fail_memory(uint64_t n) const;
  Limits limits_;
  uint64_t steps_ = 0;
  uint64_t bytes_ = 0;
  std::vector<std::unique_ptr<Object>> objects_;
};

// Python semantics.
bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b, Heap* heap, int depth = 0);
// -1/0/1; throws TypeError like Python for unorderable pairs.
int py_compare(const Value& a, const Value& b, Heap* heap, int depth = 0);
std::string py_str(const Value& v, Heap* heap);   // str(v); Undefined -> ""
std::string py_repr(const Value& v, Heap* heap);  // repr(v)
std::string py_float_repr(double d);
std::string py_string_repr(std::string_view s);
const char* type_name(const Value& v);  // Python type name for error messages: 'str', 'NoneType', ...
// Python hashability (dict keys, unique): lists and dicts are not.
bool hashable(const Value& v);

}  // namespace tessera::text::tpl
