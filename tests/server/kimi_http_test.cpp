// The Kimi path end to end over HTTP: a random-weight DeepSeek-V3-architecture model with the
// Kimi-style tiktoken tokenizer and the Kimi-K2-Thinking chat template (the model opens <think>
// itself; thinking is on by default), driven with scripted output through the real engine:
// reasoning, content, Kimi tool calls with verbatim ids, streamed and non-streamed alike.
#include <gtest/gtest.h>

#include <filesystem>

#include "http_helpers.h"
#include "server/demo_model.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;

fs::path kimi_model_dir() {
  const fs::path dir = fs::path(TESSERA_SERVER_TEST_DIR) / "kimi-random-v2";
  if (fs::exists(dir / "COMPLETE")) return dir;
  const fs::path tmp = make_temp_dir("tessera-kimi-model");
  server::write_random_deepseek_v3(tmp, 200320, 200001, 200000);
  const fs::path tok = fixtures_dir() / "tokenizers" / "kimi-style-tiktoken";
  fs::copy_file(tok / "tiktoken.model", tmp / "tiktoken.model");
  fs::copy_file(tok / "tokenizer_config.json", tmp / "tokenizer_config.json");
  fs::copy_file(fixtures_dir() / "chat_templates" / "kimi-k2-thinking.jinja", tmp / "chat_template.jinja");
  write_file(tmp / "COMPLETE", "");
  std::error_code ec;
  fs::rename(tmp, dir, ec);  // a concurrent test may have won the race: use its copy
  if (ec) fs::remove_all(tmp);
  return dir;
}

Json chat_body(bool stream) {
  Json b = {{"model", "kimi-test"},
            {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"tools",
             {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}},
            {"max_tokens", 80},
            {"stream", stream},
            {"tessera_script",
             "<think>Need the weather.</think>Let me check. <|tool_calls_section_begin|><|tool_call_begin|>"
             "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
             "<|tool_calls_section_end|><|im_end|>"}};
  if (stream) b["stream_options"] = {{"include_usage", true}};
  return b;
}

TEST(ServerKimi, ReasoningAndToolCallsStreamedAndNot) {
  ServerProcess srv({"--model", kimi_model_dir().string(), "--served-model-name", "kimi-test"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_json(c, "/v1/chat/completions", chat_body(false).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json full = Json::parse(r->body);
  const Json& m = full["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Need the weather.");
  EXPECT_EQ(m["content"], "Let me check. ");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["id"], "functions.get_weather:0");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");

  auto s = post_json(c, "/v1/chat/completions", chat_body(true).dump());
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  bool done = false;
  const auto events = sse_events(s->body, &done);
  ASSERT_TRUE(done);
  std::string reasoning, content, id, name, args, finish;
  Json usage;
  for (const auto& e : events) {
    if (e.contains("usage") && !e["usage"].is_null()) usage = e["usage"];
    if (e["choices"].empty()) continue;
    const auto& ch = e["choices"][0];
    const auto& d = ch["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const auto& t : d["tool_calls"]) {
        EXPECT_EQ(t["index"], 0);
        if (t.contains("id")) id += t["id"].get<std::string>();
        if (t["function"].contains("name")) name += t["function"]["name"].get<std::string>();
        if (t["function"].contains("arguments")) args += t["function"]["arguments"].get<std::string>();
      }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(reasoning, m["reasoning_content"].get<std::string>());
  EXPECT_EQ(content, m["content"].get<std::string>());
  EXPECT_EQ(id, m["tool_calls"][0]["id"].get<std::string>());
  EXPECT_EQ(name, m["tool_calls"][0]["function"]["name"].get<std::string>());
  EXPECT_EQ(args, m["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(usage, full["usage"]);
  EXPECT_GT(usage["completion_tokens_details"]["reasoning_tokens"].get<int>(), 0);
}

// Constrained decoding in Kimi's syntax: after free (scripted) reasoning, tool_choice required
// makes the random model write a well-formed Kimi tool section with valid arguments, and
// response_format a JSON answer.
TEST(ServerKimi, ToolChoiceRequiredAndJsonAnswersInKimiSyntax) {
  ServerProcess srv({"--model", kimi_model_dir().string(), "--served-model-name", "kimi-test"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  Json b = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"tools", Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
               {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
                "additionalProperties": false}}}])")},
            {"max_tokens", 300},
            {"temperature", 1.0},
            {"tessera_script", "<think>Need a call.</think>"}};
  // required: one or more calls (a random model may chain several, so max_tokens may cut the last);
  // named: exactly one, then the section closes and EOS follows.
  for (const Json& choice :
       {Json("required"), Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})")}) {
    b["tool_choice"] = choice;
    b["seed"] = 1;
    auto r = post_json(c, "/v1/chat/completions", b.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json full = Json::parse(r->body);
    const Json& m = full["choices"][0]["message"];
    EXPECT_EQ(m["reasoning_content"], "Need a call.");
    ASSERT_GE(m["tool_calls"].size(), 1u) << r->body;
    for (const auto& call : m["tool_calls"]) {
      EXPECT_EQ(call["function"]["name"], "get_weather");
      EXPECT_EQ(call["id"].get<std::string>().rfind("functions.get_weather:", 0), 0u) << call;
      const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(args == Json({{"city", "Paris"}}) || args == Json({{"city", "Oslo"}})) << args;
    }
    if (choice.is_object()) {
      EXPECT_EQ(m["tool_calls"].size(), 1u) << r->body;
      EXPECT_EQ(full["choices"][0]["finish_reason"], "stop") << r->body;
    }
  }
  Json j = {{"messages", {{{"role", "user"}, {"content", "JSON?"}}}},
            {"response_format",
             {{"type", "json_schema"},
              {"json_schema", {{"name", "x"}, {"schema", Json::parse(R"({"type": "object", "properties":
                 {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})")}}}}},
            {"max_tokens", 60},
            {"seed", 3},
            {"tessera_script", "<think>Think.</think>"}};
  auto r = post_json(c, "/v1/chat/completions", j.dump());
  ASSERT_TRUE(r);
  const Json m = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Think.");
  const Json answer = Json::parse(m["content"].get<std::string>());
  EXPECT_TRUE(answer == Json({{"ok", true}}) || answer == Json({{"ok", false}})) << m;
}

}  // namespace
}  // namespace tessera::test
