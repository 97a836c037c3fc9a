#include "text/template/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "text/template/error.h"
#include "text/template/utf8.h"

namespace tessera::text::tpl {

Value from_json(const nlohmann::ordered_json& j, Heap& heap, int depth) {
  if (depth > heap.limits().max_depth)
    throw TemplateError("input JSON is nested deeper than the template engine allows");
  heap.charge(1);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, heap, depth + 1));
      return heap.new_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = heap.new_dict();
      auto& entries = d.dict()->entries;
      entries.reserve(j.size());
      // JSON object keys are unique after parsing, so append without lookups.
      for (const auto& [k, x] : j.items()) entries.emplace_back(Value::string(k), from_json(x, heap, depth + 1));
      return d;
    }
    default:
      return Value::none();
  }
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  char buf[16];
  for (size_t p = 0; p < s.size();) {
    const size_t start = p;
    uint32_t cp = utf8_next(s, p);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (cp >= 0xDC80 && cp <= 0xDCFF)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (ensure_ascii && cp >= 0x7F) {
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(start, p - start));
    }
  }
  out.push_back('"');
  return out;
}

namespace {

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

struct Dumper {
  const JsonDumpOptions& o;
  Heap* heap;
  std::string out;

  void newline(int level) {
    out.push_back('\n');
    for (int k = 0; k < level; ++k) out += *o.indent;
  }

  std::string key_text(const Value& k) {
    switch (k.kind) {
      case Kind::String:
        return k.s;
      case Kind::Int:
        return std::to_string(k.i);
      case Kind::Bool:
        return k.b ? "true" : "false";
      case Kind::None:
        return "null";
      case Kind::Float:
        return float_json(k.f);
      default:
        throw TemplateError(std::string("TypeError: keys must be str, int, float, bool or None, not ") + type_name(k));
    }
  }

  void dump(const Value& v, int level) {
    if (level > 500) throw TemplateError("ValueError: Circular reference detected");
    if (heap) {
      heap->charge(1 + out.size() / 65536);
      heap->check_string(out.size());
    }
    switch (v.kind) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.b ? "true" : "false";
        return;
      case Kind::Int:
        out += std::to_string(v.i);
        return;
      case Kind::Float:
        out += float_json(v.f);
        return;
      case Kind::String:
        if (heap) heap->charge(v.s.size() / 16);
        out += json_quote(v.s, o.ensure_ascii);
        return;
      case Kind::List: {
        const auto& items = v.list()->items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += o.item_separator;
          if (o.indent) newline(level + 1);
          dump(items[k], level + 1);
        }
        if (o.indent) newline(level);
        out.push_back(']');
        return;
      }
      case Kind::Dict: {
        const auto& entries = v.dict()->entries;
        if (entries.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> items;
        items.reserve(entries.size());
        for (const auto& [k, x] : entries) items.emplace_back(key_text(k), &x);
        if (o.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out.push_back('{');
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += o.item_separator;
          if (o.indent) newline(level + 1);
          out += json_quote(items[k].first, o.ensure_ascii);
          out += o.key_separator;
          dump(*items[k].second, level + 1);
        }
        if (o.indent) newline(level);
        out.push_back('}');
        return;
      }
      default:
        throw TemplateError(std::string("TypeError: Object of type ") + type_name(v) + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& opts, Heap* heap) {
  Dumper d{opts, heap, {}};
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace tessera::text::tpl
