// tojson must print what Python's json.dumps prints. Expected strings are written by hand from
// Python's documented json.dumps behaviour (default separators ", " and ": ", ensure_ascii=False as
// HF passes it, float repr, indent layout).
#include <gtest/gtest.h>

#include "text/template/template.h"

namespace tessera::text {
namespace {

std::string render(const std::string& src, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  return Template::parse(src).render(vars);
}

TEST(ToJson, DefaultSeparatorsAndKeyOrder) {
  auto vars = nlohmann::ordered_json::parse(R"({"x": {"b": 1, "a": [1, 2.5, "s"], "c": null, "d": true}})");
  EXPECT_EQ(render("{{ x | tojson }}", vars), R"({"b": 1, "a": [1, 2.5, "s"], "c": null, "d": true})");
}

TEST(ToJson, CompactSeparators) {
  auto vars = nlohmann::ordered_json::parse(R"({"x": {"b": 1, "a": [1, 2]}})");
  EXPECT_EQ(render("{{ x | tojson(separators=(',', ':')) }}", vars), R"({"b":1,"a":[1,2]})");
}

TEST(ToJson, NonAsciiKeptAndControlCharsEscaped) {
  auto vars = nlohmann::ordered_json::parse(R"({"s": "héllo 你好 🇫🇷 \"q\" \\ \n\t\r\b\f \u0001 \u007f"})");
  EXPECT_EQ(render("{{ s | tojson }}", vars), "\"héllo 你好 🇫🇷 \\\"q\\\" \\\\ \\n\\t\\r\\b\\f \\u0001 \x7f\"");
}

TEST(ToJson, EnsureAsciiTrueUsesSurrogatePairs) {
  auto vars = nlohmann::ordered_json::parse(R"({"s": "é😀"})");
  EXPECT_EQ(render("{{ s | tojson(ensure_ascii=true) }}", vars), R"("\u00e9\ud83d\ude00")");
}

TEST(ToJson, HtmlCharactersAreNotEscaped) {
  // jinja2's own tojson would print \u003c; HF's override is plain json.dumps.
  auto vars = nlohmann::ordered_json::parse(R"({"s": "<a href='x'>&</a>"})");
  EXPECT_EQ(render("{{ s | tojson }}", vars), R"("<a href='x'>&</a>")");
}

TEST(ToJson, Indent) {
  auto vars = nlohmann::ordered_json::parse(R"({"x": {"a": [1, {}], "b": []}})");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}", vars), "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(render("{{ [1] | tojson(indent='\\t') }}", vars), "[\n\t1\n]");
}

TEST(ToJson, SortKeys) {
  auto vars = nlohmann::ordered_json::parse(R"({"x": {"b": {"z": 1, "y": 2}, "a": 0}})");
  EXPECT_EQ(render("{{ x | tojson(sort_keys=true) }}", vars), R"({"a": 0, "b": {"y": 2, "z": 1}})");
}

TEST(ToJson, Numbers) {
  auto vars = nlohmann::ordered_json::parse(
      R"({"a": 1.0, "b": 1e16, "c": 0.0001, "d": 1e-5, "e": 123456789012, "f": -0.5, "g": 1.5e300})");
  EXPECT_EQ(render("{{ [a, b, c, d, e, f, g] | tojson }}", vars),
            "[1.0, 1e+16, 0.0001, 1e-05, 123456789012, -0.5, 1.5e+300]");
  EXPECT_EQ(render("{{ [1.0 / 3, 2 ** 62, 0.1 + 0.2] | tojson }}"),
            "[0.3333333333333333, 4611686018427387904, 0.30000000000000004]");
}

TEST(ToJson, TuplesAreArraysAndNonStringKeysAreConverted) {
  EXPECT_EQ(render("{{ {1: (1, 2), 2.5: none, none: 'x', false: 0} | tojson }}"),
            R"({"1": [1, 2], "2.5": null, "null": "x", "false": 0})");
  // 1 == True in Python, so they are the same key: the value is replaced, the key kept.
  EXPECT_EQ(render("{{ {1: 'a', true: 'b'} | tojson }}"), R"({"1": "b"})");
}

TEST(ToJson, UndefinedIsNotSerializable) {
  EXPECT_THROW(render("{{ missing | tojson }}"), TemplateError);
  EXPECT_THROW(render("{{ namespace(a=1) | tojson }}"), TemplateError);
}

}  // namespace
}  // namespace tessera::text
