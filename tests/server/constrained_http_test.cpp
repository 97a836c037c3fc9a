// Constrained decoding through `tessera serve` on the demo model (random weights, DeepSeek-V3
// tokenizer and template): response_format json_object / json_schema and tool_choice required /
// named give well-formed output from a model that, unconstrained, writes noise. The checks parse
// the output and test it against the schema by hand, so they fail if any token escapes the grammar.
#include <gtest/gtest.h>

#include <set>

#include "http_helpers.h"
#include "server_process.h"

namespace tessera::test {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

// Every value bounded (enum, boolean, integer in a range), so a random model finishes quickly.
const Json kSchema = Json::parse(R"({
  "type": "object",
  "properties": {
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "ok": {"type": "boolean"},
    "n": {"type": "integer", "minimum": 0, "maximum": 100}
  },
  "required": ["unit", "ok", "n"],
  "additionalProperties": false
})");

void expect_matches_schema(const std::string& content) {
  Json j;
  ASSERT_NO_THROW(j = Json::parse(content)) << content;
  ASSERT_TRUE(j.is_object()) << content;
  EXPECT_EQ(j.size(), 3u) << content;
  EXPECT_TRUE(j["unit"] == "celsius" || j["unit"] == "fahrenheit") << content;
  EXPECT_TRUE(j["ok"].is_boolean()) << content;
  ASSERT_TRUE(j["n"].is_number_integer()) << content;
  EXPECT_GE(j["n"].get<int64_t>(), 0) << content;
  EXPECT_LE(j["n"].get<int64_t>(), 100) << content;
}

Json chat(Json extra) {
  Json b = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris, as JSON?"}}}}, {"max_tokens", 400}};
  b.update(extra);
  return b;
}

Json response_format_schema() {
  return {{"type", "json_schema"}, {"json_schema", {{"name", "weather"}, {"strict", true}, {"schema", kSchema}}}};
}

Json post(httplib::Client& c, const std::string& path, const Json& body, int status = 200) {
  auto r = post_json(c, path, body.dump());
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, status) << r->body;
  return Json::parse(r->body);
}

TEST(ServerConstrained, JsonSchemaHoldsForRandomWeightsStreamedAndNot) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  for (int seed : {1, 2, 3}) {
    const Json body = chat({{"response_format", response_format_schema()}, {"temperature", 1.0}, {"seed", seed}});
    const Json r = post(c, "/v1/chat/completions", body);
    ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    const std::string content = r["choices"][0]["message"]["content"];
    expect_matches_schema(content);

    Json sb = body;
    sb["stream"] = true;
    auto s = post_json(c, "/v1/chat/completions", sb.dump());
    ASSERT_TRUE(s);
    bool done = false;
    std::string streamed;
    for (const auto& e : sse_events(s->body, &done))
      if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
        streamed += e["choices"][0]["delta"]["content"].get<std::string>();
    EXPECT_TRUE(done);
    EXPECT_EQ(streamed, content) << "seed " << seed;
  }
  // Unconstrained, the same model does not write JSON: the constraint is what made it.
  const Json free_run = post(c, "/v1/chat/completions", chat({{"temperature", 1.0}, {"seed", 1}, {"max_tokens", 30}}));
  EXPECT_FALSE(Json::accept(free_run["choices"][0]["message"]["content"].get<std::string>()));
}

TEST(ServerConstrained, ScriptedTextIsKeptWhereItFitsAndOverruledWhereNot) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  const Json fits = post(c, "/v1/chat/completions",
                         chat({{"response_format", {{"type", "json_object"}}},
                               {"tessera_script", "{\"a\": [1, 2], \"b\": \"x\"}" + kEos}}));
  EXPECT_EQ(fits["choices"][0]["message"]["content"], "{\"a\": [1, 2], \"b\": \"x\"}");
  EXPECT_EQ(fits["choices"][0]["finish_reason"], "stop");
  // A chatty preamble is not JSON: the grammar replaces those tokens.
  const Json overruled = post(c, "/v1/chat/completions",
                              chat({{"response_format", response_format_schema()},
                                    {"temperature", 0},
                                    {"tessera_script", "Sure! Here it is: {\"unit\": \"celsius\"" + kEos}}));
  expect_matches_schema(overruled["choices"][0]["message"]["content"]);
}

TEST(ServerConstrained, ReasoningIsFreeAndTheAnswerIsConstrained) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  const Json r = post(c, "/v1/chat/completions",
                      chat({{"response_format", response_format_schema()},
                            {"chat_template_kwargs", {{"thinking", true}}},
                            {"seed", 5},
                            {"tessera_script", "Plain words, not JSON.</think>"}}));
  const Json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Plain words, not JSON.");
  expect_matches_schema(m["content"]);
}

Json weather_tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {},
      "additionalProperties": false}}}])");
}

void expect_valid_call(const Json& call) {
  const std::string name = call["function"]["name"];
  const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
  if (name == "get_time") {
    EXPECT_EQ(args, Json::object());
  } else {
    ASSERT_EQ(name, "get_weather");
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << args;
    ASSERT_TRUE(args["days"].is_number_integer()) << args;
    EXPECT_GE(args["days"].get<int>(), 1);
    EXPECT_LE(args["days"].get<int>(), 7);
  }
}

TEST(ServerConstrained, ToolChoiceRequiredAndNamedAreEnforced) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  for (int seed : {1, 2}) {
    const Json r =
        post(c, "/v1/chat/completions",
             chat({{"tools", weather_tools()}, {"tool_choice", "required"}, {"temperature", 1.0}, {"seed", seed}}));
    const Json& choice = r["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u) << r.dump();
    for (const auto& call : choice["message"]["tool_calls"]) expect_valid_call(call);
  }
  const Json named = post(c, "/v1/chat/completions",
                          chat({{"tools", weather_tools()},
                                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                                {"seed", 4}}));
  const Json& choice = named["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop") << named.dump();  // OpenAI: a named choice ends with "stop"
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << named.dump();
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  expect_valid_call(choice["message"]["tool_calls"][0]);
  // A script that calls the tool the right way goes through untouched.
  const Json scripted =
      post(c, "/v1/chat/completions",
           chat({{"tools", weather_tools()},
                 {"tool_choice", "required"},
                 {"tessera_script",
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
                  "\"Oslo\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" +
                      kEos}}));
  ASSERT_EQ(scripted["choices"][0]["message"]["tool_calls"].size(), 1u) << scripted.dump();
  EXPECT_EQ(scripted["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Oslo\", \"days\": 3}");
}

TEST(ServerConstrained, CompletionsAndErrors) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  const Json r = post(c, "/v1/completions",
                      {{"prompt", "JSON:"},
                       {"max_tokens", 40},
                       {"response_format", {{"type", "json_object"}}},
                       {"tessera_script", "{\"k\": null}" + kEos}});
  EXPECT_EQ(r["choices"][0]["text"], "{\"k\": null}");

  // /v1/responses text.format is the chat request's response_format.
  const Json resp = post(c, "/v1/responses",
                         {{"input", "JSON please"},
                          {"text", {{"format", {{"type", "json_schema"}, {"name", "weather"}, {"schema", kSchema}}}}},
                          {"temperature", 0}});
  ASSERT_EQ(resp["status"], "completed") << resp.dump();
  expect_matches_schema(resp["output"].back()["content"][0]["text"]);

  const Json bad_schema =
      post(c, "/v1/chat/completions",
           chat({{"response_format",
                  {{"type", "json_schema"},
                   {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "a+"}}}}}}}}),
           400);
  EXPECT_EQ(bad_schema["error"]["param"], "response_format");
  EXPECT_NE(bad_schema["error"]["message"].get<std::string>().find("pattern"), std::string::npos) << bad_schema;
  const Json bad_type = post(c, "/v1/chat/completions", chat({{"response_format", {{"type", "yaml"}}}}), 400);
  EXPECT_EQ(bad_type["error"]["param"], "response_format.type");
  // The server is still fine.
  post(c, "/v1/chat/completions", chat({{"max_tokens", 2}}));
}

}  // namespace
}  // namespace tessera::test
