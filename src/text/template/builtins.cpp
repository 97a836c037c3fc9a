// Attribute and item access, operators, global functions and Python methods of str/list/dict,
// with CPython's results and error messages.
#include <algorithm>
#include <cmath>
#include <optional>
#include <ctime>

#include "text/template/error.h"
#include "text/template/interpreter.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {
namespace {

[[noreturn]] void type_error(const std::string& msg) { throw TemplateError("TypeError: " + msg); }

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(type_name(v)) + " object";
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value make_method(Interpreter& in, const Value& self, const std::string& name) {
  auto* c = in.heap().make<CallableObj>();
  c->type = CallableObj::Type::Method;
  c->name = name;
  c->self = self;
  return Value::object(Kind::Callable, c);
}

const std::string& str_arg(const Value& v, const char* fn) {
  if (v.kind != Kind::String) type_error(std::string(fn) + "() argument must be str, not " + type_name(v));
  return v.s;
}

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_int())
    type_error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + fn + ")");
  return v.as_int();
}

bool py_isalpha(uint32_t cp) { return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp >= 0xC0; }

std::string py_title(std::string_view s, bool capitalize_only) {
  std::string out;
  bool prev_cased = false;
  bool first = true;
  for (size_t p = 0; p < s.size();) {
    size_t start = p;
    uint32_t cp = utf8_next(s, p);
    std::string ch(s.substr(start, p - start));
    bool upper_it = capitalize_only ? first : !prev_cased;
    out += upper_it ? py_upper(ch) : py_lower(ch);
    prev_cased = py_isalpha(cp);
    first = false;
  }
  return out;
}

std::vector<std::string> py_split(Interpreter& in, const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  in.heap().charge(s.size() / 16);
  // The parts and the list they become, checked against the memory budget as they are cut: a
  // split into single characters costs ~100 bytes a character.
  uint64_t built = 0;
  if (sep.is_none() || sep.is_undefined()) {
    // Whitespace split: runs of whitespace separate, empty strings are dropped.
    size_t p = 0;
    const size_t n = s.size();
    while (p < n) {
      size_t q = p;
      while (q < n) {
        size_t r = q;
        if (!py_isspace(utf8_next(s, r))) break;
        q = r;
      }
      p = q;
      if (p >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(py_strip(s.substr(p), false, true));
        break;
      }
      q = p;
      while (q < n) {
        size_t r = q;
        if (py_isspace(utf8_next(s, r))) break;
        q = r;
      }
      parts.push_back(s.substr(p, q - p));
      built += sizeof(Value) + sizeof(std::string) + (q - p);
      in.heap().ensure_room(built);
      p = q;
    }
    return parts;
  }
  const std::string& d = str_arg(sep, "split");
  if (d.empty()) throw TemplateError("ValueError: empty separator");
  size_t p = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
    size_t q = s.find(d, p);
    if (q == std::string::npos) break;
    parts.push_back(s.substr(p, q - p));
    built += sizeof(Value) + sizeof(std::string) + (q - p);
    in.heap().ensure_room(built);
    p = q + d.size();
  }
  parts.push_back(s.substr(p));
  return parts;
}

Value string_list(Interpreter& in, const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& x : parts) items.push_back(Value::string(x));
  return in.heap().new_list(std::move(items));
}

bool starts_or_ends(const std::string& s, const Value& arg, bool ends) {
  auto one = [&](const Value& v) {
    const std::string& x = str_arg(v, ends ? "endswith" : "startswith");
    if (x.size() > s.size()) return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (arg.kind == Kind::List && arg.list()->tuple) {
    for (const auto& v : arg.list()->items)
      if (one(v)) return true;
    return false;
  }
  return one(arg);
}

std::string py_replace(Interpreter& in, const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
  std::string out;
  in.heap().charge(s.size() / 16);
  if (old.empty()) {
    // Python inserts `rep` between every character and at both ends.
    int64_t done = 0;
    size_t p = 0;
    while (p <= s.size()) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (p == s.size()) break;
      size_t start = p;
      utf8_next(s, p);
      out.append(s, start, p - start);
      in.heap().check_string(out.size());
    }
    in.heap().charge_string(out.size());
    return out;
  }
  size_t p = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t q = s.find(old, p);
    if (q == std::string::npos) break;
    out.append(s, p, q - p);
    out += rep;
    in.heap().check_string(out.size());
    p = q + old.size();
    ++done;
  }
  out.append(s, p, std::string::npos);
  in.heap().charge_string(out.size());
  return out;
}

// Minimal str.format: {} / {0} / {name} fields, no format specs beyond an empty one.
std::string py_format(Interpreter& in, const std::string& fmt, Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t p = 0; p < fmt.size(); ++p) {
    char c = fmt[p];
    if (c == '{' && p + 1 < fmt.size() && fmt[p + 1] == '{') {
      out.push_back('{');
      ++p;
    } else if (c == '}' && p + 1 < fmt.size() && fmt[p + 1] == '}') {
      out.push_back('}');
      ++p;
    } else if (c == '{') {
      size_t q = fmt.find('}', p);
      if (q == std::string::npos) throw TemplateError("ValueError: Single '{' encountered in format string");
      std::string field = fmt.substr(p + 1, q - p - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        throw TemplateError("ValueError: format specs are not supported in str.format");
      Value v;
      if (field.empty()) {
        v = args.get(auto_index++, nullptr);
      } else if (field[0] >= '0' && field[0] <= '9') {
        v = args.get(static_cast<size_t>(std::strtoull(field.c_str(), nullptr, 10)), nullptr);
      } else {
        v = args.get(SIZE_MAX, field.c_str());
      }
      if (v.is_undefined()) throw TemplateError("IndexError: Replacement index out of range for positional args tuple");
      out += py_str(v, &in.heap());
      in.heap().check_string(out.size());
      p = q;
    } else if (c == '}') {
      throw TemplateError("ValueError: Single '}' encountered in format string");
    } else {
      out.push_back(c);
    }
  }
  in.heap().charge_string(out.size());
  return out;
}

// Python ints are unbounded; ours are int64 and overflow is an error, never UB.
template <class Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) throw TemplateError("OverflowError: integer result too large");
  return r;
}
constexpr auto kAdd = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
constexpr auto kSub = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
constexpr auto kMul = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) throw TemplateError("OverflowError: integer result too large");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.kind == Kind::String) {
    if (n > 0 && seq.s.size() > in.limits().max_string_bytes / static_cast<uint64_t>(n))
      in.heap().check_string(SIZE_MAX);
    in.heap().charge(seq.s.size() * n / 16);
    in.heap().charge_string(seq.s.size() * static_cast<uint64_t>(n));
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.list()->items;
  if (n > 0 && items.size() > in.limits().max_objects / static_cast<uint64_t>(n)) Heap::fail_limit("list too large");
  in.heap().charge(items.size() * n);
  uint64_t once = 0;
  for (const auto& v : items) once += Heap::value_bytes(v);
  if (n > 0 && once > in.limits().max_memory_bytes / static_cast<uint64_t>(n)) in.heap().ensure_room(UINT64_MAX);
  in.heap().ensure_room(once * static_cast<uint64_t>(n));
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return in.heap().new_list(std::move(out), seq.list()->tuple);
}

std::string unsupported(const std::string& op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'";
}

// printf-style `str % args`: %s %r %d %i %f %% with no flags, enough for templates.
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& arg) {
  std::vector<Value> args;
  if (arg.kind == Kind::List && arg.list()->tuple) {
    args = arg.list()->items;
  } else {
    args.push_back(arg);
  }
  size_t next = 0;
  std::string out;
  for (size_t p = 0; p < fmt.size(); ++p) {
    if (fmt[p] != '%') {
      out.push_back(fmt[p]);
      continue;
    }
    if (++p >= fmt.size()) throw TemplateError("ValueError: incomplete format");
    char c = fmt[p];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) type_error("not enough arguments for format string");
    const Value& v = args[next++];
    if (c == 's') {
      out += py_str(v, &in.heap());
    } else if (c == 'r') {
      out += py_repr(v, &in.heap());
    } else if (c == 'd' || c == 'i') {
      if (!v.is_number()) type_error(std::string("%d format: a real number is required, not ") + type_name(v));
      if (v.kind == Kind::Float && !(std::fabs(v.f) < 9.2e18))
        throw TemplateError("OverflowError: cannot convert float to integer");
      out += std::to_string(v.kind == Kind::Float ? static_cast<int64_t>(std::trunc(v.f)) : v.as_int());
    } else if (c == 'f') {
      if (!v.is_number()) type_error("must be real number, not " + std::string(type_name(v)));
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6f", v.as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("ValueError: unsupported format character '") + c + "'");
    }
    in.heap().check_string(out.size());
  }
  if (next < args.size()) type_error("not all arguments converted during string formatting");
  in.heap().charge_string(out.size());
  return out;
}

}  // namespace

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::Undefined:
      fail_undefined(obj);
    case Kind::Dict:
      if (is_method(obj, name)) return make_method(*this, obj, name);
      if (Value* v = obj.dict()->find(name)) return *v;
      return no_attribute(obj, name);
    case Kind::Namespace:
      if (Value* v = obj.dict()->find(name)) return *v;
      return no_attribute(obj, name);
    case Kind::Loop: {
      LoopObj* l = obj.loop();
      const auto& items = l->items->items;
      const int64_t n = static_cast<int64_t>(items.size());
      const int64_t k = l->index0;
      if (name == "index") return Value::integer(k + 1);
      if (name == "index0") return Value::integer(k);
      if (name == "revindex") return Value::integer(n - k);
      if (name == "revindex0") return Value::integer(n - k - 1);
      if (name == "first") return Value::boolean(k == 0);
      if (name == "last") return Value::boolean(k == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(l->depth0 + 1);
      if (name == "depth0") return Value::integer(l->depth0);
      if (name == "previtem") return k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
      if (name == "nextitem") return k + 1 < n ? items[k + 1] : Value::undefined("there is no next item");
      if (name == "cycle" || name == "changed") return make_method(*this, obj, name);
      return no_attribute(obj, name);
    }
    default:
      if (is_method(obj, name)) return make_method(*this, obj, name);
      return no_attribute(obj, name);
  }
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::Undefined:
      fail_undefined(obj);
    case Kind::Dict:
      heap_.charge(obj.dict()->entries.size() / 8);
      if (Value* v = obj.dict()->find(key)) return *v;
      break;
    case Kind::List:
    case Kind::String:
      if (key.is_int()) {
        const bool is_str = obj.kind == Kind::String;
        int64_t n;
        std::vector<size_t> offs;
        if (is_str) {
          heap_.charge(obj.s.size() / 16);
          offs = utf8_offsets(obj.s);
          n = static_cast<int64_t>(offs.size() - 1);
        } else {
          n = static_cast<int64_t>(obj.list()->items.size());
        }
        int64_t k = key.as_int();
        if (k < 0) k += n;
        if (k < 0 || k >= n) return Value::undefined(std::string(is_str ? "string" : "list") + " index out of range");
        if (is_str) return Value::string(obj.s.substr(offs[k], offs[k + 1] - offs[k]));
        return obj.list()->items[k];
      }
      break;
    default:
      break;
  }
  if (key.kind == Kind::String) return get_attr(obj, key.s);
  return Value::undefined(fmt::format("'{}' has no item {}", object_type_repr(obj), py_repr(key, &heap_)));
}

Value slice_value(Interpreter& in, const Value& v, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto idx = [](const Value& x) -> std::optional<int64_t> {
    if (x.is_none()) return std::nullopt;
    if (!x.is_int()) type_error("slice indices must be integers or None or have an __index__ method");
    return x.as_int();
  };
  const bool is_str = v.kind == Kind::String;
  std::vector<size_t> offs;
  int64_t len;
  if (is_str) {
    in.heap().charge(v.s.size() / 16);
    offs = utf8_offsets(v.s);
    len = static_cast<int64_t>(offs.size() - 1);
  } else {
    len = static_cast<int64_t>(v.list()->items.size());
  }
  int64_t step = idx(step_v).value_or(1);
  if (step == 0) throw TemplateError("ValueError: slice step cannot be zero");
  if (step == INT64_MIN) step = -INT64_MAX;
  const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t k = *x;
    if (k < 0) {
      k = k < -len ? lower : k + len;
      if (k < lower) k = lower;
    } else if (k > upper) {
      k = upper;
    }
    return k;
  };
  const int64_t start = clamp(idx(start_v), step < 0 ? upper : lower);
  const int64_t stop = clamp(idx(stop_v), step < 0 ? lower : upper);
  std::vector<int64_t> picks;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    picks.push_back(k);
    if ((step > 0 && k > INT64_MAX - step) || (step < 0 && k < INT64_MIN - step)) break;
  }
  in.heap().charge(picks.size());
  if (is_str) {
    std::string out;
    for (int64_t k : picks) out.append(v.s, offs[k], offs[k + 1] - offs[k]);
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(picks.size());
  for (int64_t k : picks) items.push_back(v.list()->items[k]);
  return in.heap().new_list(std::move(items), v.list()->tuple);
}

bool contains(Interpreter& in, const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::String:
      if (item.kind != Kind::String)
        type_error(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      in.heap().charge(container.s.size() / 16);
      return container.s.find(item.s) != std::string::npos;
    case Kind::List:
      for (const auto& x : container.list()->items)
        if (py_equal(x, item, &in.heap())) return true;
      return false;
    case Kind::Dict:
    case Kind::Namespace:
      if (!hashable(item)) type_error(std::string("unhashable type: '") + type_name(item) + "'");
      in.heap().charge(container.dict()->entries.size() / 8);
      return container.dict()->find(item) != nullptr;
    case Kind::Undefined:
      return false;  // Undefined iterates as empty
    default:
      type_error(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = py_str(a, &in.heap());
    s += py_str(b, &in.heap());
    in.heap().charge_string(s.size());
    in.heap().charge(s.size() / 64);
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) in.fail_undefined(a);
  if (b.is_undefined()) in.fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.kind == Kind::Float || b.kind == Kind::Float);
  if (op == "+") {
    if (nums) {
      if (floats) return Value::number(a.as_double() + b.as_double());
      return Value::integer(checked(kAdd, a.as_int(), b.as_int()));
    }
    if (a.kind == Kind::String) {
      if (b.kind != Kind::String)
        type_error(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
      in.heap().charge_string(a.s.size() + b.s.size());
      in.heap().charge((a.s.size() + b.s.size()) / 64);
      return Value::string(a.s + b.s);
    }
    if (a.kind == Kind::List) {
      if (b.kind != Kind::List || b.list()->tuple != a.list()->tuple)
        type_error(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                   type_name(a));
      uint64_t bytes = 0;
      for (const auto* l : {a.list(), b.list()})
        for (const auto& v : l->items) bytes += Heap::value_bytes(v);
      in.heap().ensure_room(bytes);
      std::vector<Value> items = a.list()->items;
      items.insert(items.end(), b.list()->items.begin(), b.list()->items.end());
      return in.heap().new_list(std::move(items), a.list()->tuple);
    }
    type_error(unsupported("+", a, b));
  }
  if (op == "*") {
    if (nums) {
      if (floats) return Value::number(a.as_double() * b.as_double());
      return Value::integer(checked(kMul, a.as_int(), b.as_int()));
    }
    if ((a.kind == Kind::String || a.kind == Kind::List) && b.is_int()) return repeat(in, a, b.as_int());
    if ((b.kind == Kind::String || b.kind == Kind::List) && a.is_int()) return repeat(in, b, a.as_int());
    type_error(unsupported("*", a, b));
  }
  if (op == "%" && a.kind == Kind::String) return Value::string(percent_format(in, a.s, b));
  if (!nums) type_error(unsupported(op, a, b));
  if (op == "-") {
    if (floats) return Value::number(a.as_double() - b.as_double());
    return Value::integer(checked(kSub, a.as_int(), b.as_int()));
  }
  if (op == "/") {
    if (b.as_double() == 0.0) throw TemplateError("ZeroDivisionError: division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (floats) {
      if (b.as_double() == 0.0) throw TemplateError("ZeroDivisionError: float floor division by zero");
      return Value::number(std::floor(a.as_double() / b.as_double()));
    }
    return Value::integer(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (floats) {
      double y = b.as_double();
      if (y == 0.0) throw TemplateError("ZeroDivisionError: float modulo");
      double m = std::fmod(a.as_double(), y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
    return Value::integer(py_mod(a.as_int(), b.as_int()));
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        if (e & 1) acc = checked(kMul, acc, base);
        e >>= 1;
        if (e > 0) base = checked(kMul, base, base);
      }
      return Value::integer(acc);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0)
      throw TemplateError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  type_error(unsupported(op, a, b));
}

Value call_global(Interpreter& in, const std::string& name, Args& args) {
  if (name == "range") {
    if (args.pos.empty() || args.pos.size() > 3) type_error("range expected 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (args.pos.size() == 1) {
      stop = int_arg(args.pos[0], "range");
    } else {
      start = int_arg(args.pos[0], "range");
      stop = int_arg(args.pos[1], "range");
      if (args.pos.size() == 3) step = int_arg(args.pos[2], "range");
    }
    if (step == 0) throw TemplateError("ValueError: range() arg 3 must not be zero");
    // Its length first: range(10**12) is refused before a byte of it is built.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 mag = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
    in.heap().ensure_room(count > static_cast<__int128>(UINT64_MAX / sizeof(Value))
                              ? UINT64_MAX
                              : static_cast<uint64_t>(count) * sizeof(Value));
    std::vector<Value> items;
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
      in.heap().charge(1);
      items.push_back(Value::integer(k));
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return in.heap().new_list(std::move(items));
  }
  if (name == "namespace" || name == "dict") {
    Value d = in.heap().new_dict();
    d.kind = name == "namespace" ? Kind::Namespace : Kind::Dict;
    for (const auto& p : args.pos) {
      if (!p.is_mapping()) type_error(name + "() positional argument must be a mapping");
      for (const auto& [k, v] : p.dict()->entries) {
        in.heap().charge_bytes(Heap::value_bytes(k) + Heap::value_bytes(v));
        d.dict()->set(k, v);
      }
    }
    for (const auto& [k, v] : args.kw) {
      in.heap().charge_bytes(sizeof(Value) + k.size() + Heap::value_bytes(v));
      d.dict()->set(Value::string(k), v);
    }
    return d;
  }
  if (name == "raise_exception") {
    throw TemplateError(py_str(args.get(0, "message"), &in.heap()));
  }
  if (name == "strftime_now") {
    const std::string fmt = py_str(args.get(0, "format"), &in.heap());
    if (fmt.size() > 256) throw TemplateError("ValueError: strftime format too long");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[2048];
    size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }
  type_error("'" + name + "' is not callable");
}

bool is_method(const Value& self, const std::string& name) {
  static const char* kStr[] = {
      "strip",   "lstrip",  "rstrip",  "split",      "rsplit",  "splitlines", "startswith",   "endswith",     "replace",
      "upper",   "lower",   "title",   "capitalize", "find",    "rfind",      "count",        "join",         "isdigit",
      "isalpha", "isalnum", "isspace", "isupper",    "islower", "format",     "removeprefix", "removesuffix", "index"};
  static const char* kDict[] = {"get", "items", "keys", "values", "pop", "update", "copy", "setdefault"};
  static const char* kList[] = {"append", "pop", "extend", "insert", "remove", "index", "count", "copy", "reverse"};
  auto in_list = [&](auto& arr) {
    for (const char* m : arr)
      if (name == m) return true;
    return false;
  };
  switch (self.kind) {
    case Kind::String:
      return in_list(kStr);
    case Kind::Dict:
      return in_list(kDict);
    case Kind::List:
      if (self.list()->tuple) return name == "index" || name == "count";
      return in_list(kList);
    default:
      return false;
  }
}

Value call_method(Interpreter& in, const Value& self, const std::string& name, Args& a) {
  Heap& heap = in.heap();
  if (self.kind == Kind::Loop) {
    LoopObj* l = self.loop();
    if (name == "cycle") {
      if (a.pos.empty()) type_error("no items for cycling given");
      return a.pos[static_cast<size_t>(l->index0) % a.pos.size()];
    }
    Value cur = heap.new_list(a.pos);
    bool changed = !l->changed_seen || !py_equal(l->changed_last, cur, &heap);
    l->changed_seen = true;
    l->changed_last = cur;
    return Value::boolean(changed);
  }
  if (self.kind == Kind::String) {
    const std::string& s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      Value chars = a.get(0, "chars", Value::none());
      if (chars.is_none()) return Value::string(py_strip(s, l, r));
      return Value::string(py_strip_chars(s, str_arg(chars, name.c_str()), l, r));
    }
    if (name == "split" || name == "rsplit") {
      Value maxv = a.get(1, "maxsplit", Value::integer(-1));
      int64_t maxsplit = int_arg(maxv, "split");
      if (name == "rsplit" && maxsplit >= 0) {
        // rsplit with a limit splits from the right: split all, then rejoin the head.
        auto parts = py_split(in, s, a.get(0, "sep", Value::none()), -1);
        if (static_cast<int64_t>(parts.size()) > maxsplit + 1) {
          Value sep = a.get(0, "sep", Value::none());
          const std::string glue = sep.is_none() ? " " : sep.s;
          const size_t head_n = parts.size() - static_cast<size_t>(maxsplit);
          std::string head;
          for (size_t k = 0; k < head_n; ++k) head += (k ? glue : "") + parts[k];
          std::vector<std::string> out{head};
          out.insert(out.end(), parts.begin() + static_cast<std::ptrdiff_t>(head_n), parts.end());
          parts = std::move(out);
        }
        return string_list(in, parts);
      }
      return string_list(in, py_split(in, s, a.get(0, "sep", Value::none()), maxsplit));
    }
    if (name == "splitlines") {
      std::vector<std::string> parts;
      size_t p = 0;
      while (p < s.size()) {
        size_t q = s.find_first_of("\r\n", p);
        if (q == std::string::npos) {
          parts.push_back(s.substr(p));
          break;
        }
        parts.push_back(s.substr(p, q - p));
        p = q + ((s[q] == '\r' && q + 1 < s.size() && s[q + 1] == '\n') ? 2 : 1);
      }
      return string_list(in, parts);
    }
    if (name == "startswith" || name == "endswith")
      return Value::boolean(starts_or_ends(s, a.get(0, "prefix"), name == "endswith"));
    if (name == "replace") {
      int64_t count = int_arg(a.get(2, "count", Value::integer(-1)), "replace");
      return Value::string(
          py_replace(in, s, str_arg(a.get(0, "old"), "replace"), str_arg(a.get(1, "new"), "replace"), count));
    }
    if (name == "upper") return Value::string(py_upper(s));
    if (name == "lower") return Value::string(py_lower(s));
    if (name == "title") return Value::string(py_title(s, false));
    if (name == "capitalize") return Value::string(py_title(py_lower(s), true));
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string& sub = str_arg(a.get(0, "sub"), name.c_str());
      size_t q = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (q == std::string::npos) {
        if (name == "index") throw TemplateError("ValueError: substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, q))));
    }
    if (name == "count") {
      const std::string& sub = str_arg(a.get(0, "sub"), "count");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t q = s.find(sub); q != std::string::npos; q = s.find(sub, q + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const auto& v : in.iterate(a.get(0, "iterable"))) {
        if (v.kind != Kind::String)
          type_error(std::string("sequence item: expected str instance, ") + type_name(v) + " found");
        if (!first) out += s;
        first = false;
        out += v.s;
        heap.check_string(out.size());
      }
      heap.charge_string(out.size());
      return Value::string(std::move(out));
    }
    if (name.rfind("is", 0) == 0) {
      if (s.empty()) return Value::boolean(false);
      bool all = true, any_cased = false, any_upper = false, any_lower = false;
      for (size_t p = 0; p < s.size();) {
        uint32_t cp = utf8_next(s, p);
        bool digit = cp >= '0' && cp <= '9';
        bool alpha = py_isalpha(cp);
        if (name == "isdigit") all &= digit;
        if (name == "isalpha") all &= alpha;
        if (name == "isalnum") all &= digit || alpha;
        if (name == "isspace") all &= py_isspace(cp);
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
          any_cased = true;
          (cp <= 'Z' ? any_upper : any_lower) = true;
        }
      }
      if (name == "isupper") return Value::boolean(any_cased && !any_lower);
      if (name == "islower") return Value::boolean(any_cased && !any_upper);
      (void)any_upper;
      return Value::boolean(all);
    }
    if (name == "format") return Value::string(py_format(in, s, a));
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string& x = str_arg(a.get(0, "prefix"), name.c_str());
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && x.size() <= s.size() && !x.empty() &&
          s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
      return self;
    }
  }
  if (self.kind == Kind::Dict) {
    DictObj* d = self.dict();
    heap.charge(d->entries.size() / 8);
    if (name == "get") {
      Value key = a.get(0, "key");
      if (!hashable(key)) type_error(std::string("unhashable type: '") + type_name(key) + "'");
      if (Value* v = d->find(key)) return *v;
      return a.get(1, "default", Value::none());
    }
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      heap.charge(d->entries.size());
      for (const auto& [k, v] : d->entries) {
        if (name == "items") {
          out.push_back(heap.new_list({k, v}, true));
        } else {
          out.push_back(name == "keys" ? k : v);
        }
      }
      return heap.new_list(std::move(out));
    }
    if (name == "pop") {
      Value key = a.get(0, "key");
      if (Value* v = d->find(key)) {
        Value r = *v;
        d->erase(key);
        return r;
      }
      if (a.has(1, "default")) return a.get(1, "default");
      throw TemplateError("KeyError: " + py_repr(key, &heap));
    }
    if (name == "setdefault") {
      Value key = a.get(0, "key");
      if (Value* v = d->find(key)) return *v;
      Value def = a.get(1, "default", Value::none());
      heap.charge_bytes(Heap::value_bytes(key) + Heap::value_bytes(def));
      d->set(key, def);
      return def;
    }
    if (name == "update") {
      for (const auto& p : a.pos) {
        if (!p.is_mapping()) type_error("dict.update() argument must be a mapping");
        for (const auto& [k, v] : p.dict()->entries) {
          heap.charge_bytes(Heap::value_bytes(k) + Heap::value_bytes(v));
          d->set(k, v);
        }
      }
      for (const auto& [k, v] : a.kw) {
        heap.charge_bytes(sizeof(Value) + k.size() + Heap::value_bytes(v));
        d->set(Value::string(k), v);
      }
      return Value::none();
    }
    if (name == "copy") {
      Value c = heap.new_dict();
      uint64_t bytes = 0;
      for (const auto& [k, v] : d->entries) bytes += Heap::value_bytes(k) + Heap::value_bytes(v);
      heap.charge_bytes(bytes);
      c.dict()->entries = d->entries;
      heap.charge(d->entries.size());
      return c;
    }
  }
  if (self.kind == Kind::List) {
    auto& items = self.list()->items;
    if (name == "append") {
      if (items.size() >= heap.limits().max_objects) Heap::fail_limit("list too large");
      Value v = a.get(0, "object");
      heap.charge_bytes(Heap::value_bytes(v));
      items.push_back(std::move(v));
      return Value::none();
    }
    if (name == "extend") {
      for (auto& v : in.iterate(a.get(0, "iterable"))) {
        heap.charge_bytes(Heap::value_bytes(v));
        items.push_back(std::move(v));
      }
      if (items.size() >= heap.limits().max_objects) Heap::fail_limit("list too large");
      return Value::none();
    }
    if (name == "insert") {
      int64_t n = static_cast<int64_t>(items.size());
      int64_t k = int_arg(a.get(0, "index"), "insert");
      if (k < 0) k = std::max<int64_t>(0, k + n);
      if (k > n) k = n;
      Value v = a.get(1, "object");
      heap.charge_bytes(Heap::value_bytes(v));
      items.insert(items.begin() + k, std::move(v));
      return Value::none();
    }
    if (name == "pop") {
      if (items.empty()) throw TemplateError("IndexError: pop from empty list");
      int64_t n = static_cast<int64_t>(items.size());
      int64_t k = int_arg(a.get(0, "index", Value::integer(-1)), "pop");
      if (k < 0) k += n;
      if (k < 0 || k >= n) throw TemplateError("IndexError: pop index out of range");
      Value r = items[k];
      items.erase(items.begin() + k);
      return r;
    }
    if (name == "remove" || name == "index" || name == "count") {
      Value x = a.get(0, "value");
      int64_t count = 0;
      for (size_t k = 0; k < items.size(); ++k) {
        if (py_equal(items[k], x, &heap)) {
          if (name == "remove") {
            items.erase(items.begin() + static_cast<std::ptrdiff_t>(k));
            return Value::none();
          }
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++count;
        }
      }
      if (name == "count") return Value::integer(count);
      throw TemplateError(name == "remove" ? "ValueError: list.remove(x): x not in list"
                                           : "ValueError: value is not in list");
    }
    if (name == "copy") return heap.new_list(items);
    if (name == "reverse") {
      std::reverse(items.begin(), items.end());
      return Value::none();
    }
  }
  type_error("'" + object_type_repr(self) + "' has no method '" + name + "'");
}

}  // namespace tessera::text::tpl
