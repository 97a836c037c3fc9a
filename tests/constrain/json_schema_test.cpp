// JSON Schema -> grammar: hand-written valid texts are accepted byte by byte and complete; invalid
// ones are refused at the byte where they go wrong; unsupported schemas fail naming keyword and path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "text/constrain/grammar.h"
#include "text/constrain/json_schema.h"

namespace tessera::text::constrain {
namespace {

using OJson = nlohmann::ordered_json;

std::shared_ptr<const CompiledGrammar> schema(const char* text) {
  return CompiledGrammar::compile(json_schema_grammar(OJson::parse(text)));
}

// -1: all bytes taken and the text is complete; -2: all taken but incomplete; else the refused byte.
int check(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Parser p(g);
  for (size_t i = 0; i < text.size(); ++i)
    if (!p.accept_byte(static_cast<uint8_t>(text[i]))) return static_cast<int>(i);
  return p.is_complete() ? -1 : -2;
}

constexpr int kOk = -1, kIncomplete = -2;

TEST(JsonSchema, NestedObject) {
  const auto g = schema(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "age": {"type": "integer"},
      "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                  "required": ["city", "zip"], "additionalProperties": false}
    },
    "required": ["name", "age", "address"],
    "additionalProperties": false
  })");
  EXPECT_EQ(check(g, R"({"name":"Ann","age":31,"address":{"city":"Paris","zip":"75001"}})"), kOk);
  EXPECT_EQ(check(g,
                  "{\n  \"name\": \"B\\u00e9a \\\"Q\\\"\",\n  \"age\": -7,\n  \"address\": {\"city\": "
                  "\"\xE5\x8C\x97\xE4\xBA\xAC\", \"zip\": \"\"}\n}"),
            kOk);
  EXPECT_EQ(check(g, R"({"name":"Ann","age":31)"), kIncomplete);
  // Wrong order, missing property, extra property, float for an integer, leading zero.
  EXPECT_EQ(check(g, R"({"age":31})"), 2);
  EXPECT_EQ(check(g, R"({"name":"A","address":{}})"), 14);
  EXPECT_EQ(check(g, R"({"name":"A","age":1,"address":{"city":"x","zip":"y"},"x":1})"), 52);
  EXPECT_EQ(check(g, R"({"name":"A","age":1.5})"), 19);
  EXPECT_EQ(check(g, R"({"name":"A","age":01})"), 19);
  // Raw control characters are not allowed in strings; bad escapes neither.
  EXPECT_EQ(check(g, "{\"name\":\"a\nb\"}"), 10);
  EXPECT_EQ(check(g, R"({"name":"a\qb"})"), 11);
  // Whitespace is bounded: one space, not two.
  EXPECT_EQ(check(g, R"({  "name":"A"})"), 2);
  EXPECT_EQ(check(g, R"({"name" :  "A"})"), 10);
}

TEST(JsonSchema, OptionalPropertiesKeepOrder) {
  const auto g = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                          "c": {"type": "integer"}}, "required": ["b"]})");
  EXPECT_EQ(check(g, R"({"b":2})"), kOk);
  EXPECT_EQ(check(g, R"({"a":1,"b":2})"), kOk);
  EXPECT_EQ(check(g, R"({"b":2,"c":3})"), kOk);
  EXPECT_EQ(check(g, R"({"a":1,"b":2,"c":3})"), kOk);
  EXPECT_EQ(check(g, R"({})"), 1);
  EXPECT_EQ(check(g, R"({"a":1})"), 6);
  EXPECT_EQ(check(g, R"({"c":3,"b":2})"), 2);
  EXPECT_EQ(check(g, R"({"b":2,"a":1})"), 8);
  EXPECT_EQ(check(g, R"({"b":2,})"), 7);
  const auto all_optional = schema(R"({"type": "object", "properties": {"a": {"type": "boolean"}}})");
  EXPECT_EQ(check(all_optional, "{}"), kOk);
  EXPECT_EQ(check(all_optional, "{\"a\":true}"), kOk);
  EXPECT_EQ(check(all_optional, "{\"b\":true}"), 2);  // additionalProperties absent: strict
}

TEST(JsonSchema, ArraysEnumsConst) {
  const auto g = schema(R"({"type": "object", "properties": {
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
      "color": {"enum": ["red", "green", 3, null]},
      "v": {"const": {"k": [1, 2]}}},
    "required": ["tags", "color", "v"]})");
  EXPECT_EQ(check(g, R"({"tags":["a"],"color":"red","v":{"k":[1,2]}})"), kOk);
  EXPECT_EQ(check(g, R"({"tags":["a", "b","c"],"color":3,"v":{"k":[1,2]}})"), kOk);
  EXPECT_EQ(check(g, R"({"tags":["a"],"color":null,"v":{"k":[1,2]}})"), kOk);
  EXPECT_EQ(check(g, R"({"tags":[],"color":"red","v":{"k":[1,2]}})"), 9);
  EXPECT_EQ(check(g, R"({"tags":["a","b","c","d"],"color":"red"})"), 20);
  EXPECT_EQ(check(g, R"({"tags":["a"],"color":"blue")"), 23);
  EXPECT_EQ(check(g, R"({"tags":["a"],"color":"reds")"), 26);
  EXPECT_EQ(check(g, R"({"tags":["a"],"color":3,"v":{"k":[1,3]}})"), 36);
}

TEST(JsonSchema, AnyOfNullableTypeArrays) {
  const auto g = schema(R"({"type": "object", "properties": {
      "x": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
      "y": {"type": ["number", "null"]},
      "z": {"type": "boolean", "nullable": true}},
    "required": ["x", "y", "z"]})");
  EXPECT_EQ(check(g, R"({"x":1,"y":null,"z":null})"), kOk);
  EXPECT_EQ(check(g, R"({"x":"s","y":-1.5e+3,"z":false})"), kOk);
  EXPECT_EQ(check(g, R"({"x":"s","y":2E7,"z":true})"), kOk);
  EXPECT_EQ(check(g, R"({"x":true)"), 5);
  EXPECT_EQ(check(g, R"({"x":1.5)"), 6);  // integer, not number
  EXPECT_EQ(check(g, R"({"x":1,"y":"1")"), 11);
  EXPECT_EQ(check(g, R"({"x":1,"y":1.)"), kIncomplete);
  EXPECT_EQ(check(g, R"({"x":1,"y":1.,)"), 13);
  EXPECT_EQ(check(g, R"({"x":1,"y":.5)"), 11);
}

TEST(JsonSchema, IntegerBounds) {
  const auto g = schema(R"({"type": "integer", "minimum": -15, "maximum": 123})");
  for (const char* ok : {"-15", "-10", "-9", "-1", "0", "7", "99", "100", "123", "20"})
    EXPECT_EQ(check(g, ok), kOk) << ok;
  EXPECT_EQ(check(g, "-16"), 2);
  EXPECT_EQ(check(g, "124"), 2);
  EXPECT_EQ(check(g, "1234"), 3);
  EXPECT_EQ(check(g, "-0"), 1);
  EXPECT_EQ(check(g, "200"), 2);
  EXPECT_EQ(check(g, "-150"), 3);
  EXPECT_EQ(check(g, "007"), 1);
  const auto positive = schema(R"({"type": "integer", "exclusiveMinimum": 0})");
  EXPECT_EQ(check(positive, "0"), 0);
  EXPECT_EQ(check(positive, "1"), kOk);
  EXPECT_EQ(check(positive, "10"), kOk);
  EXPECT_EQ(check(positive, "-1"), 0);
  const auto big = schema(R"({"type": "integer", "minimum": 1000, "exclusiveMaximum": 2000})");
  EXPECT_EQ(check(big, "999"), 0);  // only 4-digit numbers starting with 1
  EXPECT_EQ(check(big, "100"), kIncomplete);
  EXPECT_EQ(check(big, "1000"), kOk);
  EXPECT_EQ(check(big, "1999"), kOk);
  EXPECT_EQ(check(big, "2000"), 0);
  EXPECT_EQ(check(big, "10000"), 4);
  const auto nullable = schema(R"({"type": ["integer", "null"], "maximum": 5})");
  EXPECT_EQ(check(nullable, "null"), kOk);
  EXPECT_EQ(check(nullable, "5"), kOk);
  EXPECT_EQ(check(nullable, "-7"), kOk);
  EXPECT_EQ(check(nullable, "6"), 0);
  EXPECT_EQ(check(nullable, "50"), 1);
}

TEST(JsonSchema, RecursiveRefs) {
  const auto g = schema(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "kids"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_EQ(check(g, R"({"v":1,"kids":[]})"), kOk);
  EXPECT_EQ(check(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"), kOk);
  EXPECT_EQ(check(g, R"({"v":1,"kids":[{"v":2}]})"), 21);
  const auto defs = schema(R"({"definitions": {"a": {"type": "array", "items": {"$ref": "#"}}},
                              "anyOf": [{"type": "null"}, {"$ref": "#/definitions/a"}]})");
  EXPECT_EQ(check(defs, "[[null,[]],null]"), kOk);
  EXPECT_EQ(check(defs, "[1]"), 1);
}

TEST(JsonSchema, AlternativesWithoutFiniteInstanceAreRemoved) {
  const char* endless = R"({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                             "required": ["x"]}}, "anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]})";
  const auto g = schema(endless);
  EXPECT_EQ(check(g, "null"), kOk);
  EXPECT_EQ(check(g, "{"), 0);
  EXPECT_THROW(schema(R"({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                          "required": ["x"]}}, "$ref": "#/$defs/a"})"),
               core::Error);
}

TEST(JsonSchema, PrefixItemsAndFormats) {
  const auto g = schema(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "format": "date"}],
                          "minItems": 2})");
  EXPECT_EQ(check(g, R"([1,"2024-02-29"])"), kOk);
  EXPECT_EQ(check(g, R"([1])"), 2);
  EXPECT_EQ(check(g, R"([1,"2024-13-01"])"), 10);
  EXPECT_EQ(check(g, R"([1,"2024-02-29",3])"), 15);
  const auto u = schema(R"({"type": "string", "format": "uuid"})");
  EXPECT_EQ(check(u, R"("123e4567-e89b-12d3-a456-426614174000")"), kOk);
  EXPECT_EQ(check(u, R"("123e4567e)"), 9);
  const auto dt = schema(R"({"type": "string", "format": "date-time"})");
  EXPECT_EQ(check(dt, R"("2024-01-02T03:04:05.123Z")"), kOk);
  EXPECT_EQ(check(dt, R"("2024-01-02T03:04:05+01:00")"), kOk);
  EXPECT_EQ(check(dt, R"("2024-01-02T24:00:00Z")"), 13);
  const auto email = schema(R"({"type": "string", "format": "email"})");  // not enforced
  EXPECT_EQ(check(email, R"("not an email")"), kOk);
}

TEST(JsonSchema, AnyValueAndJsonObject) {
  const auto any = schema("{}");
  EXPECT_EQ(check(any, R"([1, {"a": [true, false, null, "x"]}, -0.5e-3])"), kOk);
  EXPECT_EQ(check(any, "\"x\""), kOk);
  EXPECT_EQ(check(any, "[1,]"), 3);
  const auto obj = CompiledGrammar::compile(json_object_grammar());
  EXPECT_EQ(check(obj, R"({"a": {"b": [1, 2, {}]}, "c": "d"})"), kOk);
  EXPECT_EQ(check(obj, "{}"), kOk);
  EXPECT_EQ(check(obj, "[]"), 0);
  EXPECT_EQ(check(obj, "{\"a\":1} "), 7);  // nothing after the value
  EXPECT_EQ(check(obj, "{\"a\":\n\t\t1}"), kOk);
}

void expect_error(const char* schema_text, const std::string& expected) {
  try {
    json_schema_grammar(OJson::parse(schema_text), "response_format.json_schema.schema");
    ADD_FAILURE() << "no error for " << schema_text;
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, Errors) {
  expect_error(R"({"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 2}}})",
               "response_format.json_schema.schema/properties/age: unsupported keyword 'multipleOf'");
  expect_error(R"({"type": "string", "pattern": "^a$"})",
               "response_format.json_schema.schema: unsupported keyword 'pattern'");
  expect_error(R"({"type": "object", "properties": {"a/b": {"type": "string", "maxLength": 3}}})",
               "schema/properties/a~1b: unsupported keyword 'maxLength'");
  expect_error(R"({"$ref": "#/$defs/missing"})", "schema/$ref: reference '#/$defs/missing' not found");
  expect_error(R"({"$ref": "http://example.com/s.json"})", "unsupported $ref 'http://example.com/s.json'");
  expect_error(R"({"type": "array", "items": {"type": "strin"}})", "schema/items/type: unknown type 'strin'");
  expect_error(R"({"allOf": [{"type": "string"}, {"type": "string"}]})", "schema/allOf: only an allOf with a single");
  expect_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
               "schema/required: property 'b' is not in properties");
  expect_error(R"({"type": "array", "maxItems": 100000})", "schema/maxItems: 100000 is above the supported 1000");
  expect_error(R"({"not": {}})", "schema: unsupported keyword 'not'");
  expect_error(R"({"type": "number", "minimum": 0})", "schema: minimum/maximum are supported for type 'integer' only");
  expect_error(R"({"type": "integer", "minimum": 0.5})", "schema/minimum: must be an integer");
  expect_error(R"({"type": "integer", "minimum": 3, "maximum": 2})", "schema: no integer lies between");
  // A schema built in code may hold strings that are not UTF-8: an error, not a crash.
  OJson bad_utf8;
  bad_utf8["enum"] = OJson::array({std::string("\xFF")});
  EXPECT_THROW(json_schema_grammar(bad_utf8), core::Error);
  std::string deep = "{}";
  for (int i = 0; i < 100; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  expect_error(deep.c_str(), "nested deeper than 64 levels");
}

}  // namespace
}  // namespace tessera::text::constrain
