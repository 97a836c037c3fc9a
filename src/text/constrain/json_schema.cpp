#include "text/constrain/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tessera::text::constrain {

namespace {

using OJson = nlohmann::ordered_json;
using Expr = Grammar::Expr;
using Rule = Grammar::Rule;

// Whitespace between JSON tokens: at most one unit per gap, a unit being one space or a newline
// followed by up to kMaxIndent spaces/tabs. Enough for compact and pretty-printed output, bounded
// so that a model cannot loop on whitespace forever.
constexpr uint32_t kMaxIndent = 24;
// Numbers: at most 18 integer digits (any such integer fits in int64), 30 fraction digits and 3
// exponent digits.
constexpr uint32_t kMaxIntDigits = 18, kMaxFracDigits = 30, kMaxExpDigits = 3;

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// Keywords that only annotate (or, for discriminator, restate what oneOf already constrains).
const std::set<std::string_view>& ignored_keywords() {
  static const std::set<std::string_view> k = {"description", "title",       "default",       "examples", "$schema",
                                               "$id",         "$comment",    "deprecated",    "readOnly", "writeOnly",
                                               "$defs",       "definitions", "discriminator", "format"};
  return k;
}

const std::set<std::string_view>& handled_keywords() {
  static const std::set<std::string_view> k = {"type",
                                               "properties",
                                               "required",
                                               "additionalProperties",
                                               "enum",
                                               "const",
                                               "items",
                                               "prefixItems",
                                               "minItems",
                                               "maxItems",
                                               "anyOf",
                                               "oneOf",
                                               "allOf",
                                               "$ref",
                                               "nullable",
                                               "minimum",
                                               "maximum",
                                               "exclusiveMinimum",
                                               "exclusiveMaximum"};
  return k;
}

class Compiler {
 public:
  Compiler(const OJson& root, std::string base, const SchemaLimits& limits)
      : root_(root), base_(std::move(base)), limits_(limits) {}

  Grammar take(Expr body) {
    const Rule root = g_.add_rule("root");
    g_.define(root, body);
    g_.set_root(root);
    return std::move(g_);
  }

  Expr compile(const OJson& s, const std::string& path, size_t depth) {
    TESSERA_CHECK(depth <= limits_.max_depth, "{}: schema nested deeper than {} levels", path, limits_.max_depth);
    TESSERA_CHECK(++nodes_ <= limits_.max_nodes, "{}: schema has more than {} nodes", path, limits_.max_nodes);
    TESSERA_CHECK(g_.num_exprs() <= limits_.max_grammar_exprs, "{}: schema too large (grammar over {} expressions)",
                  path, limits_.max_grammar_exprs);
    if (s.is_boolean()) {
      TESSERA_CHECK(s.get<bool>(), "{}: schema 'false' matches nothing", path);
      return g_.ref(value());
    }
    TESSERA_CHECK(s.is_object(), "{}: a schema must be an object or a boolean, got {}", path, s.type_name());
    for (const auto& [key, v] : s.items()) {
      if (ignored_keywords().count(key) || handled_keywords().count(key)) continue;
      core::fail("{}: unsupported keyword '{}'", path, key);
    }
    Expr e = compile_inner(s, path, depth);
    if (auto it = s.find("nullable"); it != s.end()) {
      TESSERA_CHECK(it->is_boolean(), "{}/nullable: must be a boolean", path);
      if (it->get<bool>()) e = g_.choice({e, g_.literal("null")});
    }
    return e;
  }

  // Rules shared by every schema: whitespace, strings, numbers, any value.
  Rule ws() {
    if (ws_ < 0) {
      ws_ = g_.add_rule("ws");
      g_.define(ws_, g_.optional(g_.choice(
                         {g_.literal(" "), g_.seq({g_.literal("\n"),
                                                   g_.repeat(g_.bytes({{' ', ' '}, {'\t', '\t'}}), 0, kMaxIndent)})})));
    }
    return ws_;
  }
  Expr w() { return g_.ref(ws()); }

  Rule string() {
    if (string_ < 0) {
      string_ = g_.add_rule("string");
      const Expr plain = g_.chars({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}}, /*negate=*/true);
      const Expr hex = g_.bytes({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
      const Expr escape = g_.seq(
          {g_.literal("\\"),
           g_.choice(
               {g_.bytes(
                    {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                g_.seq({g_.literal("u"), hex, hex, hex, hex})})});
      g_.define(string_, g_.seq({g_.literal("\""), g_.star(g_.choice({plain, escape})), g_.literal("\"")}));
    }
    return string_;
  }

  // Digits are bounded (kMaxIntDigits keeps integers within int64, what parsers read back exactly),
  // which also stops a model from looping on digits.
  Expr int_part() {
    return g_.seq({g_.optional(g_.literal("-")),
                   g_.choice({g_.literal("0"), g_.seq({g_.bytes({{'1', '9'}}),
                                                       g_.repeat(g_.bytes({{'0', '9'}}), 0, kMaxIntDigits - 1)})})});
  }
  Rule integer() {
    if (integer_ < 0) {
      integer_ = g_.add_rule("integer");
      g_.define(integer_, int_part());
    }
    return integer_;
  }
  Rule number() {
    if (number_ < 0) {
      number_ = g_.add_rule("number");
      const Expr digit = g_.bytes({{'0', '9'}});
      g_.define(number_,
                g_.seq({int_part(), g_.optional(g_.seq({g_.literal("."), g_.repeat(digit, 1, kMaxFracDigits)})),
                        g_.optional(
                            g_.seq({g_.bytes({{'e', 'e'}, {'E', 'E'}}), g_.optional(g_.bytes({{'+', '+'}, {'-', '-'}})),
                                    g_.repeat(digit, 1, kMaxExpDigits)}))}));
    }
    return number_;
  }
  Rule boolean() {
    if (boolean_ < 0) {
      boolean_ = g_.add_rule("boolean");
      g_.define(boolean_, g_.choice({g_.literal("true"), g_.literal("false")}));
    }
    return boolean_;
  }

  Rule value() {
    if (value_ < 0) {
      value_ = g_.add_rule("value");
      object_any_ = g_.add_rule("object");
      array_any_ = g_.add_rule("array");
      g_.define(value_, g_.choice({g_.ref(object_any_), g_.ref(array_any_), g_.ref(string()), g_.ref(number()),
                                   g_.ref(boolean()), g_.literal("null")}));
      const Expr member = g_.seq({g_.ref(string()), w(), g_.literal(":"), w(), g_.ref(value_)});
      g_.define(object_any_,
                g_.seq({g_.literal("{"), w(),
                        g_.optional(g_.seq({member, g_.star(g_.seq({w(), g_.literal(","), w(), member})), w()})),
                        g_.literal("}")}));
      g_.define(
          array_any_,
          g_.seq(
              {g_.literal("["), w(),
               g_.optional(g_.seq({g_.ref(value_), g_.star(g_.seq({w(), g_.literal(","), w(), g_.ref(value_)})), w()})),
               g_.literal("]")}));
    }
    return value_;
  }
  Rule object_any() {
    value();
    return object_any_;
  }
  Expr ref(Rule r) { return g_.ref(r); }

 private:
  Expr sep() { return g_.seq({w(), g_.literal(","), w()}); }

  Expr compile_inner(const OJson& s, const std::string& path, size_t depth) {
    if (auto it = s.find("$ref"); it != s.end()) return compile_ref(*it, path, depth);
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (auto it = s.find(kw); it != s.end()) {
        TESSERA_CHECK(it->is_array() && !it->empty(), "{}/{}: must be a non-empty array", path, kw);
        std::vector<Expr> alts;
        for (size_t i = 0; i < it->size(); ++i)
          alts.push_back(compile((*it)[i], path + "/" + kw + "/" + std::to_string(i), depth + 1));
        return g_.choice(std::move(alts));
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      TESSERA_CHECK(it->is_array() && it->size() == 1, "{}/allOf: only an allOf with a single schema is supported",
                    path);
      return compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    if (auto it = s.find("const"); it != s.end()) return g_.literal(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      TESSERA_CHECK(it->is_array() && !it->empty(), "{}/enum: must be a non-empty array", path);
      std::vector<Expr> alts;
      for (const auto& v : *it) alts.push_back(g_.literal(v.dump()));
      return g_.choice(std::move(alts));
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else {
        TESSERA_CHECK(it->is_array() && !it->empty(), "{}/type: must be a string or a non-empty array of strings",
                      path);
        for (const auto& t : *it) {
          TESSERA_CHECK(t.is_string(), "{}/type: must be a string or a non-empty array of strings", path);
          types.push_back(t.get<std::string>());
        }
      }
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else {
      return g_.ref(value());
    }
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    for (const auto& t : types)
      TESSERA_CHECK(!bounded || t == "integer" || t == "null",
                    "{}: minimum/maximum are supported for type 'integer' only, not '{}'", path, t);
    std::vector<Expr> alts;
    for (const auto& t : types) {
      if (t == "string")
        alts.push_back(compile_string(s, path));
      else if (t == "number")
        alts.push_back(g_.ref(number()));
      else if (t == "integer")
        alts.push_back(compile_integer(s, path));
      else if (t == "boolean")
        alts.push_back(g_.ref(boolean()));
      else if (t == "null")
        alts.push_back(g_.literal("null"));
      else if (t == "object")
        alts.push_back(compile_object(s, path, depth));
      else if (t == "array")
        alts.push_back(compile_array(s, path, depth));
      else
        core::fail("{}/type: unknown type '{}'", path, t);
    }
    return alts.size() == 1 ? alts[0] : g_.choice(std::move(alts));
  }

  // Integers within [minimum, maximum] (exclusive bounds moved by one): each digit count of the
  // range becomes digit classes, the classic numeric-range construction.
  Expr compile_integer(const OJson& s, const std::string& path) {
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    if (!bounded) return g_.ref(integer());
    constexpr int64_t kMax = 999999999999999999;  // kMaxIntDigits digits
    auto bound = [&](const char* kw, int64_t adjust, int64_t fallback) -> int64_t {
      auto it = s.find(kw);
      if (it == s.end()) return fallback;
      TESSERA_CHECK(it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() <= uint64_t(kMax)),
                    "{}/{}: must be an integer within 18 digits for an integer schema", path, kw);
      const int64_t v = it->get<int64_t>();
      TESSERA_CHECK(v >= -kMax && v <= kMax, "{}/{}: must be an integer within 18 digits", path, kw);
      return v + adjust;
    };
    const int64_t lo = std::max(bound("minimum", 0, -kMax), bound("exclusiveMinimum", 1, -kMax));
    const int64_t hi = std::min(bound("maximum", 0, kMax), bound("exclusiveMaximum", -1, kMax));
    TESSERA_CHECK(lo <= hi, "{}: no integer lies between the minimum and the maximum", path);
    std::vector<Expr> alts;
    if (hi >= 0) alts.push_back(range(static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi)));
    if (lo < 0)
      alts.push_back(
          g_.seq({g_.literal("-"), range(static_cast<uint64_t>(hi < 0 ? -hi : 1), static_cast<uint64_t>(-lo))}));
    return alts.size() == 1 ? alts[0] : g_.choice(std::move(alts));
  }

  // Canonical decimal numbers in [lo, hi].
  Expr range(uint64_t lo, uint64_t hi) {
    const std::string a = std::to_string(lo), b = std::to_string(hi);
    std::vector<Expr> alts;
    for (size_t len = a.size(); len <= b.size(); ++len) {
      std::string from = a;
      if (len != a.size()) {  // 10^(len-1)
        from.assign(len, '0');
        from[0] = '1';
      }
      const std::string to = len == b.size() ? b : std::string(len, '9');
      alts.push_back(same_length(from, to));
    }
    return alts.size() == 1 ? alts[0] : g_.choice(std::move(alts));
  }

  // Digit strings of one length between `a` and `b` (a <= b).
  Expr same_length(std::string_view a, std::string_view b) {
    if (a.empty()) return g_.empty();
    auto digits = [&](char lo, char hi) { return g_.bytes({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}}); };
    const size_t rest = a.size() - 1;
    if (a[0] == b[0]) return g_.seq({digits(a[0], a[0]), same_length(a.substr(1), b.substr(1))});
    const bool a_rest_min = a.find_first_not_of('0', 1) == std::string_view::npos;
    const bool b_rest_max = b.find_first_not_of('9', 1) == std::string_view::npos;
    const Expr any = g_.repeat(digits('0', '9'), static_cast<uint32_t>(rest), static_cast<uint32_t>(rest));
    if (a_rest_min && b_rest_max) return g_.seq({digits(a[0], b[0]), any});
    const std::string nines(rest, '9'), zeros(rest, '0');
    std::vector<Expr> alts;
    alts.push_back(g_.seq({digits(a[0], a[0]), same_length(a.substr(1), nines)}));
    if (b[0] - a[0] >= 2)
      alts.push_back(g_.seq({digits(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)), any}));
    alts.push_back(g_.seq({digits(b[0], b[0]), same_length(zeros, b.substr(1))}));
    return g_.choice(std::move(alts));
  }

  Expr compile_ref(const OJson& ref, const std::string& path, size_t depth) {
    TESSERA_CHECK(ref.is_string(), "{}/$ref: must be a string", path);
    const auto r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return g_.ref(it->second);
    TESSERA_CHECK(!r.empty() && r[0] == '#', "{}/$ref: unsupported $ref '{}' (only local references '#...' are)", path,
                  r);
    const OJson* target = nullptr;
    try {
      const OJson::json_pointer ptr(r.substr(1));
      if (root_.contains(ptr)) target = &root_.at(ptr);
    } catch (const nlohmann::json::exception&) {
      core::fail("{}/$ref: bad reference '{}'", path, r);
    }
    TESSERA_CHECK(target != nullptr, "{}/$ref: reference '{}' not found", path, r);
    TESSERA_CHECK(refs_.size() < limits_.max_nodes, "{}/$ref: too many references", path);
    const Rule rule = g_.add_rule("ref" + r);
    refs_[r] = rule;  // before compiling the target, so that recursive references find it
    g_.define(rule, compile(*target, base_ + r.substr(1), depth + 1));
    return g_.ref(rule);
  }

  Expr compile_string(const OJson& s, const std::string& path) {
    for (const char* kw : {"minLength", "maxLength", "pattern"})
      TESSERA_CHECK(!s.contains(kw), "{}: unsupported keyword '{}'", path, kw);
    if (auto it = s.find("format"); it != s.end() && it->is_string()) {
      const auto f = it->get<std::string>();
      const Expr d = g_.bytes({{'0', '9'}});
      const Expr q = g_.literal("\"");
      auto date = [&] {
        return g_.seq(
            {d, d, d, d, g_.literal("-"),
             g_.choice({g_.seq({g_.literal("0"), g_.bytes({{'1', '9'}})}),
                        g_.seq({g_.literal("1"), g_.bytes({{'0', '2'}})})}),
             g_.literal("-"),
             g_.choice({g_.seq({g_.literal("0"), g_.bytes({{'1', '9'}})}), g_.seq({g_.bytes({{'1', '2'}}), d}),
                        g_.seq({g_.literal("3"), g_.bytes({{'0', '1'}})})})});
      };
      auto time = [&] {
        const Expr hh =
            g_.choice({g_.seq({g_.bytes({{'0', '1'}}), d}), g_.seq({g_.literal("2"), g_.bytes({{'0', '3'}})})});
        const Expr mm = g_.seq({g_.bytes({{'0', '5'}}), d});
        return g_.seq({hh, g_.literal(":"), mm, g_.literal(":"), g_.choice({mm, g_.literal("60")}),
                       g_.optional(g_.seq({g_.literal("."), g_.repeat(d, 1, 9)})),
                       g_.choice({g_.bytes({{'Z', 'Z'}, {'z', 'z'}}),
                                  g_.seq({g_.bytes({{'+', '+'}, {'-', '-'}}), hh, g_.literal(":"), mm})})});
      };
      if (f == "date") return g_.seq({q, date(), q});
      if (f == "time") return g_.seq({q, time(), q});
      if (f == "date-time") return g_.seq({q, date(), g_.bytes({{'T', 'T'}, {'t', 't'}}), time(), q});
      if (f == "uuid") {
        const Expr h = g_.bytes({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
        auto hs = [&](uint32_t n) { return g_.repeat(h, n, n); };
        return g_.seq({q, hs(8), g_.literal("-"), hs(4), g_.literal("-"), hs(4), g_.literal("-"), hs(4),
                       g_.literal("-"), hs(12), q});
      }
      // Other formats (email, uri, ...) are not enforced: any string.
    }
    return g_.ref(string());
  }

  Expr compile_object(const OJson& s, const std::string& path, size_t depth) {
    for (const char* kw : {"patternProperties", "minProperties", "maxProperties", "propertyNames"})
      TESSERA_CHECK(!s.contains(kw), "{}: unsupported keyword '{}'", path, kw);
    const OJson* props = nullptr;
    if (auto it = s.find("properties"); it != s.end()) {
      TESSERA_CHECK(it->is_object(), "{}/properties: must be an object", path);
      props = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      TESSERA_CHECK(it->is_array(), "{}/required: must be an array of strings", path);
      for (const auto& r : *it) {
        TESSERA_CHECK(r.is_string(), "{}/required: must be an array of strings", path);
        TESSERA_CHECK(props && props->contains(r.get<std::string>()),
                      "{}/required: property '{}' is not in properties (additional properties are not generated)", path,
                      r.get<std::string>());
        required.insert(r.get<std::string>());
      }
    }
    const OJson* additional = nullptr;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      TESSERA_CHECK(it->is_boolean() || it->is_object(), "{}/additionalProperties: must be a boolean or a schema",
                    path);
      additional = &*it;
    }
    if (!props || props->empty()) {
      if (additional && additional->is_boolean() && !additional->get<bool>())
        return g_.seq({g_.literal("{"), w(), g_.literal("}")});
      if (!additional || additional->is_boolean()) return g_.ref(object_any());
      // A map: string keys, values of one schema.
      const Expr v = compile(*additional, path + "/additionalProperties", depth + 1);
      const Expr member = g_.seq({g_.ref(string()), w(), g_.literal(":"), w(), v});
      return g_.seq({g_.literal("{"), w(), g_.optional(g_.seq({member, g_.star(g_.seq({sep(), member})), w()})),
                     g_.literal("}")});
    }
    TESSERA_CHECK(!additional || additional->is_boolean(),
                  "{}/additionalProperties: a schema for additional properties next to 'properties' is not supported",
                  path);
    // Properties in the schema's order; optional ones may be left out. tails[i]: properties i.. after
    // at least one was written (each preceded by a comma); heads[i]: the first written is i or later.
    std::vector<Expr> kv;
    std::vector<bool> req;
    for (const auto& [key, sub] : props->items()) {
      const Expr v = compile(sub, path + "/properties/" + pointer_token(key), depth + 1);
      kv.push_back(g_.seq({g_.literal(OJson(key).dump()), w(), g_.literal(":"), w(), v}));
      req.push_back(required.count(key) > 0);
    }
    const size_t n = kv.size();
    // Up to the first required property, each tail is used twice (by the previous tail and by a
    // head): those become rules, so that the grammar stays linear in the number of properties.
    const size_t first_required = static_cast<size_t>(std::find(req.begin(), req.end(), true) - req.begin());
    std::vector<Expr> tails(n + 1);
    tails[n] = g_.empty();
    for (size_t i = n; i-- > 0;) {
      const Expr one = g_.seq({sep(), kv[i]});
      tails[i] = g_.seq({req[i] ? one : g_.optional(one), tails[i + 1]});
      if (i >= 1 && i <= first_required) {
        const Rule t = g_.add_rule("properties_tail");
        g_.define(t, tails[i]);
        tails[i] = g_.ref(t);
      }
    }
    // heads[i] for i = n means "nothing written", allowed only if no property is required.
    Expr head = required.empty() ? g_.empty() : -1;
    for (size_t i = n; i-- > 0;) {
      const Expr here = g_.seq({kv[i], tails[i + 1]});
      head = (req[i] || head < 0) ? here : g_.choice({here, head});
    }
    return g_.seq({g_.literal("{"), w(), head, w(), g_.literal("}")});
  }

  Expr compile_array(const OJson& s, const std::string& path, size_t depth) {
    for (const char* kw : {"uniqueItems", "contains", "minContains", "maxContains"})
      TESSERA_CHECK(!s.contains(kw), "{}: unsupported keyword '{}'", path, kw);
    auto count = [&](const char* kw) -> std::optional<uint32_t> {
      auto it = s.find(kw);
      if (it == s.end()) return std::nullopt;
      TESSERA_CHECK(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0),
                    "{}/{}: must be a non-negative integer", path, kw);
      TESSERA_CHECK(it->get<uint64_t>() <= limits_.max_repeat, "{}/{}: {} is above the supported {}", path, kw,
                    it->get<uint64_t>(), limits_.max_repeat);
      return static_cast<uint32_t>(it->get<uint64_t>());
    };
    const uint32_t min = count("minItems").value_or(0);
    std::optional<uint32_t> max = count("maxItems");
    TESSERA_CHECK(!max || *max >= min, "{}: maxItems is below minItems", path);
    std::vector<Expr> prefix;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      TESSERA_CHECK(it->is_array(), "{}/prefixItems: must be an array of schemas", path);
      TESSERA_CHECK(it->size() <= limits_.max_repeat, "{}/prefixItems: too many items", path);
      for (size_t i = 0; i < it->size(); ++i)
        prefix.push_back(compile((*it)[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    std::optional<Expr> rest;
    if (auto it = s.find("items"); it != s.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) rest = compile(*it, path + "/items", depth + 1);
    } else if (prefix.empty()) {
      rest = g_.ref(value());
    }
    const size_t k = prefix.size();
    if (!rest) max = static_cast<uint32_t>(std::min<size_t>(max.value_or(k), k));
    TESSERA_CHECK(!max || *max >= min, "{}: minItems {} cannot be met with {} prefixItems and no items", path, min, k);
    // elements(j, prev): items j.. (j already written; `prev`: a comma comes first).
    auto elements = [&](auto&& self, uint32_t j, bool prev) -> Expr {
      if (max && j >= *max) return g_.empty();
      if (j >= k) {
        const uint32_t rmin = min > j ? min - j : 0;
        const std::optional<uint32_t> rmax = max ? std::optional<uint32_t>(*max - j) : std::nullopt;
        if (prev) return g_.repeat(g_.seq({sep(), *rest}), rmin, rmax);
        const Expr first = g_.seq({*rest, g_.repeat(g_.seq({sep(), *rest}), rmin > 0 ? rmin - 1 : 0,
                                                    rmax ? std::optional<uint32_t>(*rmax - 1) : std::nullopt)});
        return rmin > 0 ? first : g_.optional(first);
      }
      const Expr e = g_.seq({prev ? sep() : g_.empty(), prefix[j], self(self, j + 1, true)});
      return j < min ? e : g_.optional(e);
    };
    const Expr body = elements(elements, 0, false);
    return g_.seq({g_.literal("["), w(), body, w(), g_.literal("]")});
  }

  Grammar g_;
  const OJson& root_;
  std::string base_;
  SchemaLimits limits_;
  size_t nodes_ = 0;
  std::map<std::string, Rule> refs_;
  Rule ws_ = -1, string_ = -1, integer_ = -1, number_ = -1, boolean_ = -1, value_ = -1, object_any_ = -1,
       array_any_ = -1;
};

}  // namespace

Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const std::string& path, const SchemaLimits& limits) {
  Compiler c(schema, path, limits);
  try {
    const Expr body = c.compile(schema, path, 0);
    return c.take(body);
  } catch (const nlohmann::json::exception& e) {  // e.g. dump() of a string that is not UTF-8
    core::fail("{}: {}", path, e.what());
  }
}

Grammar json_object_grammar() {
  const OJson empty;
  Compiler c(empty, "", {});
  return c.take(c.ref(c.object_any()));
}

Grammar json_value_grammar() {
  const OJson empty;
  Compiler c(empty, "", {});
  return c.take(c.ref(c.value()));
}

}  // namespace tessera::text::constrain
