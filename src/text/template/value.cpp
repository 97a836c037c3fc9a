#include "text/template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/template/error.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {

ListObj* Value::list() const { return kind == Kind::List ? static_cast<ListObj*>(obj) : nullptr; }
DictObj* Value::dict() const {
  return kind == Kind::Dict || kind == Kind::Namespace ? static_cast<DictObj*>(obj) : nullptr;
}
CallableObj* Value::callable() const { return kind == Kind::Callable ? static_cast<CallableObj*>(obj) : nullptr; }
LoopObj* Value::loop() const { return kind == Kind::Loop ? static_cast<LoopObj*>(obj) : nullptr; }

Value* DictObj::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k.kind == Kind::String && k.s == key) return &v;
  return nullptr;
}

Value* DictObj::find(const Value& key) {
  if (key.kind == Kind::String) return find(std::string_view(key.s));
  for (auto& [k, v] : entries)
    if (py_equal(k, key, nullptr)) return &v;
  return nullptr;
}

void DictObj::set(const Value& key, Value v) {
  if (Value* slot = find(key)) {
    *slot = std::move(v);
  } else {
    entries.emplace_back(key, std::move(v));
  }
}

bool DictObj::erase(const Value& key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (py_equal(it->first, key, nullptr)) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

Value Heap::new_list(std::vector<Value> items, bool tuple) {
  charge(items.size());
  uint64_t bytes = 0;
  for (const auto& v : items) bytes += value_bytes(v);
  charge_bytes(bytes);
  auto* l = make<ListObj>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value::object(Kind::List, l);
}

Value Heap::new_dict() { return Value::object(Kind::Dict, make<DictObj>()); }

void Heap::fail_limit(const std::string& what) { throw TemplateError(what); }

void Heap::fail_memory(uint64_t n) const {
  throw TemplateError("template exceeded its memory budget: " + std::to_string(bytes_) +
                      " bytes of strings and lists built, " + std::to_string(n) + " more would pass the limit of " +
                      std::to_string(limits_.max_memory_bytes));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.b;
    case Kind::Int:
      return v.i != 0;
    case Kind::Float:
      return v.f != 0.0;
    case Kind::String:
      return !v.s.empty();
    case Kind::List:
      return !v.list()->items.empty();
    case Kind::Dict:
      return !v.dict()->entries.empty();
    default:
      return true;
  }
}

namespace {
void check_depth(int depth) {
  // Cycles (a list appended to itself) and absurd nesting end here, as RecursionError would.
  if (depth > 500) throw TemplateError("RecursionError: maximum recursion depth exceeded");
}
}  // namespace

bool py_equal(const Value& a, const Value& b, Heap* heap, int depth) {
  check_depth(depth);
  if (heap) heap->charge(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      if (heap) heap->charge(a.s.size() / 16);
      return a.s == b.s;
    case Kind::List: {
      const auto *la = a.list(), *lb = b.list();
      if (la == lb) return true;
      if (la->tuple != lb->tuple || la->items.size() != lb->items.size()) return false;
      for (size_t k = 0; k < la->items.size(); ++k)
        if (!py_equal(la->items[k], lb->items[k], heap, depth + 1)) return false;
      return true;
    }
    case Kind::Dict: {
      auto *da = a.dict(), *db = b.dict();
      if (da == db) return true;
      if (da->entries.size() != db->entries.size()) return false;
      for (auto& [k, v] : da->entries) {
        if (heap) heap->charge(db->entries.size() / 8);
        Value* other = db->find(k);
        if (!other || !py_equal(v, *other, heap, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.obj == b.obj;
  }
}

int py_compare(const Value& a, const Value& b, Heap* heap, int depth) {
  check_depth(depth);
  if (heap) heap->charge(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.kind == Kind::String && b.kind == Kind::String) {
    if (heap) heap->charge(a.s.size() / 16);
    // Byte order of UTF-8 is code point order, which is how Python orders str.
    int c = a.s.compare(b.s);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind == Kind::List && b.kind == Kind::List && a.list()->tuple == b.list()->tuple) {
    const auto &x = a.list()->items, &y = b.list()->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!py_equal(x[k], y[k], heap, depth + 1)) return py_compare(x[k], y[k], heap, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined())
    throw TemplateError(a.is_undefined() && !a.s.empty() ? a.s : (!b.s.empty() ? b.s : "value is undefined"));
  throw TemplateError(std::string("TypeError: '<' not supported between instances of '") + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return v.list()->tuple ? "tuple" : "list";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return v.callable()->type == CallableObj::Type::Macro ? "Macro" : "function";
    case Kind::Loop:
      return "LoopContext";
  }
  return "object";
}

bool hashable(const Value& v) {
  if (v.kind == Kind::Dict) return false;
  if (v.kind == Kind::List) {
    if (!v.list()->tuple) return false;
    for (const auto& x : v.list()->items)
      if (!hashable(x)) return false;
  }
  return true;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits, as Python's repr uses; then Python's layout rules.
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = pos; k < epos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  int exp10 = std::atoi(sci.c_str() + epos + 1);
  int decpt = exp10 + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(decpt - nd, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  }
  return out;
}

namespace {
// Code points Python's str.isprintable() rejects, for the ones a chat message may carry:
// controls, non-ASCII spaces, line/paragraph separators and common format characters.
bool py_unprintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return true;
  if (cp >= 0xDC80 && cp <= 0xDCFF) return true;  // invalid byte carried through
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
      cp == 0x180E || (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F)
    return true;
  if ((cp >= 0xE000 && cp <= 0xF8FF) || cp >= 0xF0000 || (cp >= 0xE0000 && cp <= 0xE007F)) return true;
  return false;
}
}  // namespace

std::string py_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t p = 0; p < s.size();) {
    uint32_t cp = utf8_next(s, p);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
      std::snprintf(buf, sizeof buf, "\\udc%02x", cp & 0xFF);
      out += buf;
    } else if (py_unprintable(cp)) {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      }
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {
void repr_into(std::string& out, const Value& v, Heap* heap, int depth);

void str_into(std::string& out, const Value& v, Heap* heap, int depth) {
  switch (v.kind) {
    case Kind::Undefined:
      return;
    case Kind::String:
      out += v.s;
      return;
    default:
      repr_into(out, v, heap, depth);
  }
}

void repr_into(std::string& out, const Value& v, Heap* heap, int depth) {
  check_depth(depth);
  if (heap) {
    heap->charge(1 + out.size() / 4096);
    heap->check_string(out.size());
  }
  switch (v.kind) {
    case Kind::Undefined:
      out += "Undefined";
      return;
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += v.b ? "True" : "False";
      return;
    case Kind::Int:
      out += std::to_string(v.i);
      return;
    case Kind::Float:
      out += py_float_repr(v.f);
      return;
    case Kind::String:
      if (heap) heap->charge(v.s.size() / 16);
      out += py_string_repr(v.s);
      return;
    case Kind::List: {
      const auto* l = v.list();
      out.push_back(l->tuple ? '(' : '[');
      for (size_t k = 0; k < l->items.size(); ++k) {
        if (k) out += ", ";
        repr_into(out, l->items[k], heap, depth + 1);
      }
      if (l->tuple && l->items.size() == 1) out.push_back(',');
      out.push_back(l->tuple ? ')' : ']');
      return;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      if (v.kind == Kind::Namespace) out += "<Namespace ";
      out.push_back('{');
      bool first = true;
      for (const auto& [k, x] : v.dict()->entries) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, heap, depth + 1);
        out += ": ";
        repr_into(out, x, heap, depth + 1);
      }
      out.push_back('}');
      if (v.kind == Kind::Namespace) out.push_back('>');
      return;
    }
    case Kind::Callable: {
      const auto* c = v.callable();
      if (c->type == CallableObj::Type::Macro) {
        out += "<Macro " + py_string_repr(c->name) + ">";
      } else if (c->type == CallableObj::Type::Method) {
        out += "<built-in method " + c->name + " of " + type_name(c->self) + " object>";
      } else {
        out += "<function " + c->name + ">";
      }
      return;
    }
    case Kind::Loop: {
      const auto* l = v.loop();
      out += "<LoopContext " + std::to_string(l->index0 + 1) + "/" +
             std::to_string(l->items ? l->items->items.size() : 0) + ">";
      return;
    }
  }
}
}  // namespace

std::string py_str(const Value& v, Heap* heap) {
  if (v.kind == Kind::String) return v.s;
  std::string out;
  str_into(out, v, heap, 0);
  return out;
}

std::string py_repr(const Value& v, Heap* heap) {
  std::string out;
  repr_into(out, v, heap, 0);
  return out;
}

}  // namespace tessera::text::tpl
