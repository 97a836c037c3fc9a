// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py), plus HF's tojson.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "text/template/error.h"
#include "text/template/interpreter.h"
#include "text/template/json_value.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {
namespace {

const char* kFilters[] = {"abs",      "attr",  "capitalize", "center", "count",      "d",           "default",
                          "dictsort", "e",     "escape",     "first",  "float",      "forceescape", "format",
                          "indent",   "int",   "items",      "join",   "last",       "length",      "list",
                          "lower",    "map",   "max",        "min",    "reject",     "rejectattr",  "replace",
                          "reverse",  "round", "safe",       "select", "selectattr", "sort",        "string",
                          "sum",      "title", "tojson",     "trim",   "unique",     "upper",       "wordcount"};
const char* kTests[] = {
    "boolean", "callable",  "defined", "divisibleby", "eq",     "equalto", "escaped",  "even",     "false",    "filter",
    "float",   "ge",        "gt",      "greaterthan", "in",     "integer", "iterable", "le",       "lessthan", "lower",
    "lt",      "mapping",   "ne",      "none",        "number", "odd",     "sameas",   "sequence", "string",   "test",
    "true",    "undefined", "upper",   "==",          "!=",     "<",       "<=",       ">",        ">="};

template <size_t N>
bool listed(const char* (&names)[N], std::string_view name) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

[[noreturn]] void filter_error(const std::string& msg) { throw TemplateError(msg); }

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

int64_t len_of(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return static_cast<int64_t>(utf8_length(v.s));
    case Kind::List:
      return static_cast<int64_t>(v.list()->items.size());
    case Kind::Dict:
      return static_cast<int64_t>(v.dict()->entries.size());
    default:
      throw TemplateError(std::string("TypeError: object of type '") + type_name(v) + "' has no len()");
  }
}

// Attribute lookup for filters' `attribute=` arguments: "a.b" and "0" like jinja2's make_attrgetter.
Value attr_path(Interpreter& in, const Value& v, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(v, attribute);
  std::string path = py_str(attribute, &in.heap());
  Value cur = v;
  size_t p = 0;
  while (true) {
    size_t q = path.find('.', p);
    std::string part = path.substr(p, q == std::string::npos ? std::string::npos : q - p);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? in.get_item(cur, Value::integer(std::strtoll(part.c_str(), nullptr, 10)))
                  : in.get_item(cur, Value::string(part));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return cur;
}

// Key used by sort/unique/min/max: lowercased strings unless case_sensitive.
Value sort_key(Interpreter& in, const Value& v, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_undefined() || attribute.is_none() ? v : attr_path(in, v, attribute);
  if (!case_sensitive && k.kind == Kind::String) return Value::string(py_lower(k.s));
  return k;
}

void sort_values(Interpreter& in, std::vector<Value>& items, const Value& attribute, bool case_sensitive,
                 bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(sort_key(in, items[k], attribute, case_sensitive), k);
  in.heap().charge(items.size() * 4);
  // Python's sort is stable, and reverse=True keeps equal elements in their original order.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = py_compare(x.first, y.first, &in.heap());
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [k, idx] : keyed) out.push_back(items[idx]);
  items = std::move(out);
}

Value tojson(Interpreter& in, const Value& v, Args& args) {
  // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonDumpOptions o;
  o.ensure_ascii = truthy(args.get(0, "ensure_ascii", Value::boolean(false)));
  Value indent = args.get(1, "indent", Value::none());
  Value seps = args.get(2, "separators", Value::none());
  o.sort_keys = truthy(args.get(3, "sort_keys", Value::boolean(false)));
  if (!indent.is_none() && !indent.is_undefined()) {
    if (indent.kind == Kind::String) {
      o.indent = indent.s;
    } else if (indent.is_int()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 64)), ' ');
    } else {
      filter_error(std::string("TypeError: indent must be an int or a str, not ") + type_name(indent));
    }
    o.item_separator = ",";
  }
  if (!seps.is_none() && !seps.is_undefined()) {
    if (seps.kind != Kind::List || seps.list()->items.size() != 2 || seps.list()->items[0].kind != Kind::String ||
        seps.list()->items[1].kind != Kind::String)
      filter_error("TypeError: tojson separators must be a pair of strings");
    o.item_separator = seps.list()->items[0].s;
    o.key_separator = seps.list()->items[1].s;
  }
  std::string out = json_dumps(v, o, &in.heap());
  in.heap().charge_string(out.size());
  return Value::string(std::move(out));
}

Value do_int(const Value& v, const Value& def, int64_t base) {
  switch (v.kind) {
    case Kind::Int:
    case Kind::Bool:
      return Value::integer(v.as_int());
    case Kind::Float:
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
      return Value::integer(static_cast<int64_t>(std::trunc(v.f)));
    case Kind::String: {
      std::string s = py_strip(v.s, true, true);
      std::string digits;
      for (char c : s)
        if (c != '_') digits.push_back(c);
      if (!digits.empty()) {
        char* end = nullptr;
        errno = 0;
        long long r = std::strtoll(digits.c_str(), &end, base == 10 ? 10 : static_cast<int>(base));
        if (errno == 0 && end && *end == '\0') return Value::integer(r);
        errno = 0;
        double d = std::strtod(digits.c_str(), &end);
        if (errno == 0 && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
          return Value::integer(static_cast<int64_t>(std::trunc(d)));
      }
      return def;
    }
    default:
      return def;
  }
}

Value do_float(const Value& v, const Value& def) {
  if (v.is_number()) return Value::number(v.as_double());
  if (v.kind == Kind::String) {
    std::string s = py_strip(v.s, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::number(d);
  }
  return def;
}

Value do_round(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number())
    throw TemplateError(std::string("TypeError: type ") + type_name(v) + " doesn't define __round__ method");
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("FilterArgumentError: method must be common, ceil or floor");
  precision = std::clamp<int64_t>(precision, -20, 20);
  const double x = v.as_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double r;
  if (method == "ceil") {
    r = std::ceil(x * scale) / scale;
  } else if (method == "floor") {
    r = std::floor(x * scale) / scale;
  } else if (precision >= 0 && std::isfinite(x) && std::fabs(x) < 1e300) {
    // Python's round() rounds the exact binary value to `precision` decimals, ties to even
    // (round(2.675, 2) == 2.67); glibc's printf does exactly that.
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
    r = std::strtod(buf, nullptr);
  } else {
    const int saved = std::fegetround();
    std::fesetround(FE_TONEAREST);
    r = std::nearbyint(x * scale) / scale;
    std::fesetround(saved);
  }
  if (v.kind != Kind::Float && method == "common") return Value::integer(v.as_int());
  return Value::number(r);
}

std::string do_indent(const std::string& s0, const Value& width, bool first, bool blank) {
  std::string indention = width.kind == Kind::String
                              ? width.s
                              : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256)), ' ');
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find_first_of("\r\n", p);
    if (q == std::string::npos) {
      lines.push_back(s.substr(p));
      break;
    }
    lines.push_back(s.substr(p, q - p));
    p = q + ((s[q] == '\r' && q + 1 < s.size() && s[q + 1] == '\n') ? 2 : 1);
  }
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : indention + lines[k]);
  }
  if (first) rv = indention + rv;
  return rv;
}

}  // namespace

bool is_known_filter(std::string_view name) { return listed(kFilters, name); }
bool is_known_test(std::string_view name) { return listed(kTests, name); }

Value Interpreter::apply_filter(const std::string& name, const Value& v, Args& a) {
  heap_.charge(1);
  if (name == "tojson") return tojson(*this, v, a);
  if (name == "length" || name == "count") return Value::integer(len_of(v));
  if (name == "string") return Value::string(py_str(v, &heap_));
  if (name == "safe") return v.kind == Kind::String ? v : Value::string(py_str(v, &heap_));
  if (name == "e" || name == "escape" || name == "forceescape") return Value::string(html_escape(py_str(v, &heap_)));
  if (name == "default" || name == "d") {
    const bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value::string(""));
    return v;
  }
  if (name == "trim") {
    Value chars = a.get(0, "chars", Value::none());
    std::string s = py_str(v, &heap_);
    if (chars.is_none()) return Value::string(py_strip(s, true, true));
    return Value::string(py_strip_chars(s, py_str(chars, &heap_), true, true));
  }
  if (name == "lower") return Value::string(py_lower(py_str(v, &heap_)));
  if (name == "upper") return Value::string(py_upper(py_str(v, &heap_)));
  if (name == "capitalize" || name == "title") {
    Args none;
    return call_method(*this, Value::string(py_str(v, &heap_)), name, none);
  }
  if (name == "replace") {
    Args args;
    args.pos = {a.get(0, "old"), a.get(1, "new")};
    Value count = a.get(2, "count", Value::none());
    if (!count.is_none()) args.pos.push_back(count);
    for (auto& x : args.pos)
      if (x.kind != Kind::String && &x != &args.pos.back()) x = Value::string(py_str(x, &heap_));
    if (args.pos[1].kind != Kind::String) args.pos[1] = Value::string(py_str(args.pos[1], &heap_));
    return call_method(*this, Value::string(py_str(v, &heap_)), "replace", args);
  }
  if (name == "join") {
    std::string sep = py_str(a.get(0, "d", Value::string("")), &heap_);
    Value attribute = a.get(1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += py_str(attribute.is_none() ? x : attr_path(*this, x, attribute), &heap_);
      heap_.check_string(out.size());
    }
    heap_.charge(out.size() / 64);
    heap_.charge_string(out.size());
    return Value::string(std::move(out));
  }
  if (name == "first") {
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    if (v.is_undefined()) fail_undefined(v);
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "list") return heap_.new_list(iterate(v));
  if (name == "reverse") {
    if (v.kind == Kind::String) {
      Value none = Value::none();
      return slice_value(*this, v, none, none, Value::integer(-1));
    }
    auto items = iterate(v);
    std::reverse(items.begin(), items.end());
    return heap_.new_list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return heap_.new_list();
    if (!v.is_mapping()) filter_error("FilterArgumentError: Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict()->entries) out.push_back(heap_.new_list({k, x}, true));
    return heap_.new_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) filter_error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
    const std::string by = py_str(a.get(1, "by", Value::string("key")), &heap_);
    const bool reverse = truthy(a.get(2, "reverse", Value::boolean(false)));
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.dict()->entries) pairs.push_back(heap_.new_list({k, x}, true));
    sort_values(*this, pairs, Value::integer(by == "value" ? 1 : 0), cs, reverse);
    return heap_.new_list(std::move(pairs));
  }
  if (name == "sort") {
    auto items = iterate(v);
    sort_values(*this, items, a.get(2, "attribute", Value::none()),
                truthy(a.get(1, "case_sensitive", Value::boolean(false))),
                truthy(a.get(0, "reverse", Value::boolean(false))));
    return heap_.new_list(std::move(items));
  }
  if (name == "unique") {
    const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
    Value attribute = a.get(1, "attribute", Value::none());
    std::vector<Value> out, seen;
    for (const auto& x : iterate(v)) {
      Value k = sort_key(*this, x, attribute, cs);
      bool dup = false;
      for (const auto& s : seen)
        if (py_equal(s, k, &heap_)) dup = true;
      if (!dup) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return heap_.new_list(std::move(out));
  }
  if (name == "min" || name == "max") {
    auto items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
    sort_values(*this, items, a.get(1, "attribute", Value::none()),
                truthy(a.get(0, "case_sensitive", Value::boolean(false))), false);
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    Value attribute = a.get(0, "attribute", Value::none());
    Value total = a.get(1, "start", Value::integer(0));
    for (const auto& x : iterate(v))
      total = binary_op(*this, "+", total, attribute.is_none() ? x : attr_path(*this, x, attribute));
    return total;
  }
  if (name == "map") {
    std::vector<Value> out;
    Value attribute = a.get(SIZE_MAX, "attribute");
    if (!attribute.is_undefined()) {
      Value def = a.get(SIZE_MAX, "default");
      for (const auto& x : iterate(v)) {
        Value r = attr_path(*this, x, attribute);
        out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
      }
      return heap_.new_list(std::move(out));
    }
    if (a.pos.empty()) filter_error("FilterArgumentError: map requires a filter argument");
    const std::string fname = py_str(a.pos[0], &heap_);
    if (!is_known_filter(fname)) filter_error("TemplateRuntimeError: No filter named '" + fname + "'.");
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto& x : iterate(v)) out.push_back(apply_filter(fname, x, rest));
    return heap_.new_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool attr_mode = name == "selectattr" || name == "rejectattr";
    const bool want = name == "select" || name == "selectattr";
    size_t k = 0;
    Value attribute;
    if (attr_mode) {
      if (a.pos.empty()) filter_error("TypeError: " + name + " requires an attribute");
      attribute = a.pos[k++];
    }
    std::string test;
    Args rest;
    if (k < a.pos.size()) {
      test = py_str(a.pos[k++], &heap_);
      if (!is_known_test(test)) filter_error("TemplateRuntimeError: No test named '" + test + "'.");
      rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
      rest.kw = a.kw;
    }
    std::vector<Value> out;
    for (const auto& x : iterate(v)) {
      Value subject = attr_mode ? attr_path(*this, x, attribute) : x;
      bool r = test.empty() ? truthy(subject) : apply_test(test, subject, rest);
      if (r == want) out.push_back(x);
    }
    return heap_.new_list(std::move(out));
  }
  if (name == "int") {
    int64_t base = a.get(1, "base", Value::integer(10)).as_int();
    if (base != 10 && base != 16 && base != 8 && base != 2) base = 10;
    return do_int(v, a.get(0, "default", Value::integer(0)), base);
  }
  if (name == "float") return do_float(v, a.get(0, "default", Value::number(0.0)));
  if (name == "abs") {
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) throw TemplateError("OverflowError: integer too large");
      return Value::integer(std::llabs(v.as_int()));
    }
    throw TemplateError(std::string("TypeError: bad operand type for abs(): '") + type_name(v) + "'");
  }
  if (name == "round") {
    return do_round(v, a.get(0, "precision", Value::integer(0)).as_int(),
                    py_str(a.get(1, "method", Value::string("common")), &heap_));
  }
  if (name == "indent") {
    Value width = a.get(0, "width", Value::integer(4));
    if (width.kind != Kind::String && !width.is_int()) filter_error("TypeError: indent width must be an int or a str");
    const std::string text = py_str(v, &heap_);
    // Every line gets the indent: the result's size is known before it is built.
    const uint64_t lines = 2 + static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')) +
                           static_cast<uint64_t>(std::count(text.begin(), text.end(), '\r'));
    const uint64_t pad = width.kind == Kind::String
                             ? width.s.size()
                             : static_cast<uint64_t>(std::clamp<int64_t>(width.as_int(), 0, 256));
    if (pad > 0 && lines > (heap_.limits().max_string_bytes - text.size()) / pad) heap_.check_string(SIZE_MAX);
    heap_.charge_string(text.size() + lines * pad);
    return Value::string(do_indent(text, width, truthy(a.get(1, "first", Value::boolean(false))),
                                   truthy(a.get(2, "blank", Value::boolean(false)))));
  }
  if (name == "center") {
    std::string s = py_str(v, &heap_);
    int64_t width = std::clamp<int64_t>(a.get(0, "width", Value::integer(80)).as_int(), 0, 4096);
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return Value::string(s);
    int64_t marg = width - len;
    int64_t left = marg / 2 + (marg & width & 1);
    return Value::string(std::string(left, ' ') + s + std::string(marg - left, ' '));
  }
  if (name == "wordcount") {
    Args none;
    return Value::integer(
        static_cast<int64_t>(call_method(*this, Value::string(py_str(v, &heap_)), "split", none).list()->items.size()));
  }
  if (name == "attr") return get_attr(v, py_str(a.get(0, "name"), &heap_));
  if (name == "format") {
    if (!a.kw.empty() && !a.pos.empty())
      filter_error("FilterArgumentError: can't handle positional and keyword arguments at the same time");
    Value args = heap_.new_list(a.pos, true);
    return binary_op(*this, "%", Value::string(py_str(v, &heap_)), args);
  }
  throw TemplateError("TemplateRuntimeError: No filter named '" + name + "'.");
}

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& a) {
  heap_.charge(1);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.kind == Kind::String;
  if (name == "mapping") return v.kind == Kind::Dict;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "callable") return v.kind == Kind::Callable;
  if (name == "iterable")
    return v.kind == Kind::String || v.kind == Kind::List || v.kind == Kind::Dict || v.is_undefined();
  if (name == "sequence") return v.kind == Kind::String || v.kind == Kind::List || v.kind == Kind::Dict;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    Args none;
    return truthy(call_method(*this, Value::string(py_str(v, &heap_)), name == "lower" ? "islower" : "isupper", none));
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int())
      throw TemplateError(std::string("TypeError: unsupported operand type(s) for %: '") + type_name(v) +
                          "' and 'int'");
    if (name == "divisibleby") {
      Value d = a.get(0, "num");
      if (!d.is_int()) throw TemplateError("TypeError: divisibleby needs an integer");
      if (d.as_int() == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
      return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
    }
    const bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "filter") return is_known_filter(py_str(v, &heap_));
  if (name == "test") return is_known_test(py_str(v, &heap_));
  Value other = a.get(0, nullptr);
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other, &heap_);
  if (name == "ne" || name == "!=") return !py_equal(v, other, &heap_);
  if (name == "in") return contains(*this, other, v);
  if (name == "sameas") {
    if (v.kind != other.kind) return false;
    switch (v.kind) {
      case Kind::None:
      case Kind::Undefined:
        return true;
      case Kind::Bool:
        return v.b == other.b;
      case Kind::Int:
        return v.i == other.i;
      case Kind::Float:
        return false;
      case Kind::String:
        return v.s == other.s;
      default:
        return v.obj == other.obj;
    }
  }
  int c;
  if (name == "lt" || name == "lessthan" || name == "<") {
    c = py_compare(v, other, &heap_);
    return c < 0;
  }
  if (name == "le" || name == "<=") return py_compare(v, other, &heap_) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return py_compare(v, other, &heap_) > 0;
  if (name == "ge" || name == ">=") return py_compare(v, other, &heap_) >= 0;
  throw TemplateError("TemplateRuntimeError: No test named '" + name + "'.");
}

}  // namespace tessera::text::tpl
