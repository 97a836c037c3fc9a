// The Anthropic Messages API (POST /v1/messages) through `tessera serve` on the demo model, with
// scripted output (tessera_script) so reasoning and tool calls are deterministic: content blocks,
// stop reasons and usage, the event stream against the non-streamed answer, a multi-turn
// conversation with tool_result rendered as the chat path renders its OpenAI twin (and counted by
// /v1/messages/count_tokens), Anthropic-shaped
// errors naming the field, the x-api-key header, 429 and an engine failure mid-stream.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "http_helpers.h"
#include "server_process.h"

namespace tessera::test {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kToolScript =
    "Need the weather.</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    "```json\n{\"city\": \"Paris\", \"days\": [1, 2]}\n```<｜tool▁call▁end｜>\n"
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" +
    kEos;

Json tools() {
  return Json::parse(R"([
    {"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}])");
}

Json tool_request(bool stream) {
  return Json{{"model", "tessera-demo-dsv3-random-weights"},
              {"max_tokens", 200},
              {"stream", stream},
              {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
              {"tools", tools()},
              {"thinking", {{"type", "enabled"}, {"budget_tokens", 100}}},
              {"tessera_script", kToolScript}};
}

// The events of an Anthropic SSE body; each must be "event: NAME\ndata: JSON" with NAME its type.
std::vector<Json> anthropic_events(const std::string& body) {
  std::vector<Json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    Json j = Json::parse(ev.substr(nl + 7));
    EXPECT_EQ(j["type"], ev.substr(7, nl - 7));
    out.push_back(std::move(j));
  }
  return out;
}

// Rebuilds the message from its events as a client does; checks their order on the way.
Json assemble(const std::vector<Json>& events) {
  EXPECT_GE(events.size(), 3u);
  if (events.size() < 3) return Json();
  EXPECT_EQ(events.front()["type"], "message_start");
  EXPECT_EQ(events.back()["type"], "message_stop");
  Json msg = events.front()["message"];
  EXPECT_TRUE(msg["content"].empty());
  std::vector<std::string> json_parts;
  int open = -1;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    const std::string type = e["type"];
    if (type == "ping") continue;
    if (type == "content_block_start") {
      EXPECT_EQ(open, -1) << "a block started before the last one stopped";
      open = e["index"];
      EXPECT_EQ(open, static_cast<int>(msg["content"].size()));
      msg["content"].push_back(e["content_block"]);
      json_parts.emplace_back();
    } else if (type == "content_block_delta") {
      EXPECT_EQ(e["index"], open);
      Json& b = msg["content"][static_cast<size_t>(open)];
      const Json& d = e["delta"];
      if (d["type"] == "text_delta") b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
      if (d["type"] == "thinking_delta")
        b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
      if (d["type"] == "input_json_delta") json_parts.back() += d["partial_json"].get<std::string>();
    } else if (type == "content_block_stop") {
      EXPECT_EQ(e["index"], open);
      Json& b = msg["content"][static_cast<size_t>(open)];
      if (b["type"] == "tool_use" && !json_parts.back().empty()) b["input"] = Json::parse(json_parts.back());
      open = -1;
    } else if (type == "message_delta") {
      EXPECT_EQ(open, -1);
      msg["stop_reason"] = e["delta"]["stop_reason"];
      msg["stop_sequence"] = e["delta"]["stop_sequence"];
      msg["usage"]["output_tokens"] = e["usage"]["output_tokens"];
    } else {
      ADD_FAILURE() << "unexpected event " << e.dump();
    }
  }
  return msg;
}

httplib::Result post_messages(httplib::Client& c, const Json& body, const httplib::Headers& h = {}) {
  return c.Post("/v1/messages", h, body.dump(), "application/json");
}

TEST(ServerMessages, ThinkingTextAndToolUseStreamedAndNot) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_messages(c, tool_request(false));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const Json m = Json::parse(r->body);
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u) << m["id"];
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "tessera-demo-dsv3-random-weights");
  ASSERT_EQ(m["content"].size(), 4u) << m.dump(2);
  EXPECT_EQ(m["content"][0], Json::parse(R"({"type": "thinking", "thinking": "Need the weather.", "signature": ""})"));
  EXPECT_EQ(m["content"][1], Json::parse(R"({"type": "text", "text": "Checking."})"));
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["name"], "get_weather");
  EXPECT_EQ(m["content"][2]["input"], Json::parse(R"({"city": "Paris", "days": [1, 2]})"));
  EXPECT_EQ(m["content"][3]["name"], "get_time");
  EXPECT_EQ(m["content"][3]["input"], Json::object());
  EXPECT_FALSE(m["content"][2]["id"].get<std::string>().empty());
  EXPECT_NE(m["content"][2]["id"], m["content"][3]["id"]);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  // The DeepSeek-V3 template does not render tool definitions: the prompt is the question's turn.
  EXPECT_GT(m["usage"]["input_tokens"].get<int>(), 5);
  EXPECT_GT(m["usage"]["output_tokens"].get<int>(), 10);

  auto s = post_messages(c, tool_request(true));
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(s->body.find("[DONE]"), std::string::npos);
  const std::vector<Json> events = anthropic_events(s->body);
  Json streamed = assemble(events);
  // Same content and stop; the ids differ per request.
  for (size_t i : {2u, 3u}) {
    EXPECT_NE(streamed["content"][i]["id"], m["content"][i]["id"]);
    streamed["content"][i]["id"] = m["content"][i]["id"];
  }
  EXPECT_EQ(streamed["content"], m["content"]) << s->body;
  EXPECT_EQ(streamed["stop_reason"], "tool_use");
  EXPECT_EQ(streamed["usage"], m["usage"]);
  // Arguments stream as several input_json_delta events, not one blob at the end.
  int json_deltas = 0;
  for (const auto& e : events)
    if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta") ++json_deltas;
  EXPECT_GE(json_deltas, 3);
}

// The same conversation as an Anthropic request and as its OpenAI twin: the same prompt (so the
// tool_use and tool_result blocks are rendered as tool_calls and a tool message), and the answer.
TEST(ServerMessages, MultiTurnToolResultRendersLikeTheChatTwin) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto anthropic = [&](const std::string& result) {
    Json b{{"max_tokens", 30},
           {"system", "Be brief."},
           {"tools", tools()},
           {"messages", Json::parse(R"([
             {"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
               {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "RESULT"}]}])")},
           {"tessera_script", "It is 18C in Paris." + kEos}};
    b["messages"][2]["content"][0]["content"] = result;
    return b;
  };
  auto r = post_messages(c, anthropic("18C"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json m = Json::parse(r->body);
  EXPECT_EQ(m["content"], Json::parse(R"([{"type": "text", "text": "It is 18C in Paris."}])"));
  EXPECT_EQ(m["stop_reason"], "end_turn");

  // Raw text: the tools' keys in the order the translation writes them (a template that renders
  // tools as JSON would count the order in the prompt).
  const std::string twin = R"({"max_tokens": 30, "tessera_script": "It is 18C in Paris.)" + kEos + R"(",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}}},
              {"type": "function", "function": {"name": "get_time", "parameters": {"properties": {}, "type": "object"}}}],
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "toolu_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"}]})";
  auto o = post_json(c, "/v1/chat/completions", twin);
  ASSERT_TRUE(o);
  ASSERT_EQ(o->status, 200) << o->body;
  const Json oj = Json::parse(o->body);
  EXPECT_EQ(m["usage"]["input_tokens"], oj["usage"]["prompt_tokens"]);
  EXPECT_EQ(m["content"][0]["text"], oj["choices"][0]["message"]["content"]);

  // count_tokens renders the same prompt, without max_tokens.
  Json count = anthropic("18C");
  count.erase("max_tokens");
  auto n = c.Post("/v1/messages/count_tokens", count.dump(), "application/json");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->status, 200) << n->body;
  const Json counted{{"input_tokens", m["usage"]["input_tokens"]}};
  EXPECT_EQ(Json::parse(n->body), counted);
  count["messages"][0]["content"] = Json::parse(R"([{"type": "document", "source": {}}])");
  n = c.Post("/v1/messages/count_tokens", count.dump(), "application/json");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 400);
  EXPECT_NE(Json::parse(n->body)["error"]["message"].get<std::string>().find("messages[0].content[0].type"),
            std::string::npos)
      << n->body;

  // The tool result reaches the prompt: a longer one makes a longer prompt.
  auto longer = post_messages(c, anthropic("18C, sunny, light wind from the west"));
  ASSERT_TRUE(longer);
  ASSERT_EQ(longer->status, 200) << longer->body;
  EXPECT_GT(Json::parse(longer->body)["usage"]["input_tokens"].get<int>(), m["usage"]["input_tokens"].get<int>());
}

TEST(ServerMessages, StopSequenceAndMaxTokens) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  Json b{{"max_tokens", 30},
         {"messages", {{{"role", "user"}, {"content", "count"}}}},
         {"stop_sequences", Json::array({"NEVER", "STOP"})},
         {"thinking", {{"type", "disabled"}}},
         {"tessera_script", "one two STOP three" + kEos}};
  for (bool stream : {false, true}) {
    b["stream"] = stream;
    auto r = post_messages(c, b);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json m = stream ? assemble(anthropic_events(r->body)) : Json::parse(r->body);
    EXPECT_EQ(m["content"], Json::parse(R"([{"type": "text", "text": "one two "}])")) << stream;
    EXPECT_EQ(m["stop_reason"], "stop_sequence") << stream;
    EXPECT_EQ(m["stop_sequence"], "STOP") << stream;
  }
  b["max_tokens"] = 2;
  b.erase("stop_sequences");
  for (bool stream : {false, true}) {
    b["stream"] = stream;
    auto r = post_messages(c, b);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json m = stream ? assemble(anthropic_events(r->body)) : Json::parse(r->body);
    EXPECT_EQ(m["stop_reason"], "max_tokens") << stream;
    EXPECT_EQ(m["usage"]["output_tokens"], 2) << stream;
    EXPECT_TRUE(m["stop_sequence"].is_null()) << stream;
  }
}

TEST(ServerMessages, ErrorsAreAnthropicShapedAndNameTheField) {
  ServerProcess srv({"--api-key", "sekret"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  const httplib::Headers key = {{"x-api-key", "sekret"}};
  const Json good{{"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  // The key: x-api-key or a bearer token; neither is a 401 in Anthropic's shape.
  for (const httplib::Headers& h : {key, httplib::Headers{{"Authorization", "Bearer sekret"}}}) {
    auto r = post_messages(c, good, h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["type"], "message");
  }
  for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"x-api-key", "wrong"}}}) {
    auto r = post_messages(c, good, h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    const Json e = Json::parse(r->body);
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["error"]["type"], "authentication_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("x-api-key"), std::string::npos);
  }
  // x-api-key is Anthropic's header: the OpenAI routes keep to the bearer token and their shape.
  auto chat = c.Post("/v1/chat/completions", key, good.dump(), "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 401);
  EXPECT_EQ(Json::parse(chat->body)["error"]["type"], "authentication_error");
  EXPECT_FALSE(Json::parse(chat->body).contains("type"));

  struct Case {
    std::string name;
    Json patch;  // merged into `good`
    int status;
    std::string type, needle;  // error.type and a substring of error.message
  };
  const std::vector<Case> cases = {
      {"max_tokens missing", {{"max_tokens", nullptr}}, 400, "invalid_request_error", "max_tokens"},
      {"max_tokens zero", {{"max_tokens", 0}}, 400, "invalid_request_error", "max_tokens"},
      {"tool_result without tool_use_id",
       {{"messages", Json::parse(R"([{"role": "user", "content": "q"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "content": "r"}]}])")}},
       400,
       "invalid_request_error",
       "messages[2].content[0].tool_use_id"},
      {"image",
       {{"messages",
         Json::parse(R"([{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}])")}},
       400,
       "invalid_request_error",
       "messages[0].content[0].type"},
      {"stop_sequences not strings",
       {{"stop_sequences", Json::array({1})}},
       400,
       "invalid_request_error",
       "stop_sequences"},
      {"temperature out of range", {{"temperature", 5}}, 400, "invalid_request_error", "temperature"},
      {"budget not below max_tokens",
       {{"thinking", {{"type", "enabled"}, {"budget_tokens", 4}}}},
       400,
       "invalid_request_error",
       "thinking.budget_tokens"},
      {"unknown model", {{"model", "claude-sonnet-4-5"}}, 404, "not_found_error", "claude-sonnet-4-5"},
  };
  for (const auto& k : cases) {
    Json b = good;
    b.merge_patch(k.patch);
    auto r = post_messages(c, b, key);
    ASSERT_TRUE(r) << k.name;
    EXPECT_EQ(r->status, k.status) << k.name << ": " << r->body;
    const Json e = Json::parse(r->body);
    EXPECT_EQ(e["type"], "error") << k.name;
    EXPECT_EQ(e["error"]["type"], k.type) << k.name;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(k.needle), std::string::npos) << k.name << ": " << r->body;
  }
  auto get = c.Get("/v1/messages", key);
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST, OPTIONS");
  EXPECT_EQ(Json::parse(get->body)["error"]["type"], "invalid_request_error");
  // The server still answers.
  auto again = post_messages(c, good, key);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(ServerMessages, FullQueueIsARateLimitError) {
  ServerProcess srv({"--max-in-flight", "1"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  // A stream holds the one admission slot until the test has its answer, then hangs up.
  std::atomic<bool> release{false};
  std::thread hold([&] {
    httplib::Client h("127.0.0.1", srv.port());
    h.set_read_timeout(120, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"x","max_tokens":4000,"ignore_eos":true,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !release.load(); };
    h.send(req);
  });
  struct Release {  // also when an assertion returns early
    std::atomic<bool>& release;
    std::thread& hold;
    ~Release() {
      release = true;
      hold.join();
    }
  } release_at_end{release, hold};
  for (int k = 0; k < 5000 && metric(c, "tessera_requests_in_flight") < 1; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(metric(c, "tessera_requests_in_flight"), 1);
  const Json b{{"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = post_messages(c, b);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  const Json e = Json::parse(r->body);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
}

// The engine fails after the stream began (--test-fail-token: the step holding that token throws):
// the stream ends with an `error` event, not message_stop, and the server exits 1 on its own.
TEST(ServerMessages, EngineFailureMidStreamIsAnErrorEvent) {
  ServerProcess srv({"--test-fail-token", "4242"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(30, 0);
  const Json b{{"max_tokens", 10},
               {"stream", true},
               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"tessera_script", Json::array({100, 101, 4242, 102})}};
  auto r = post_messages(c, b);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<Json> events = anthropic_events(r->body);
  ASSERT_GE(events.size(), 2u) << r->body;
  EXPECT_EQ(events.front()["type"], "message_start");
  EXPECT_EQ(events.back(), Json::parse(R"({"type": "error", "error": {"type": "api_error",
                                          "message": "the engine failed while generating this request"}})"));
  for (const auto& e : events) EXPECT_NE(e["type"], "message_stop");
  int status = -2;
  for (int i = 0; i < 500 && status == -2; ++i) {
    int st = 0;
    if (::waitpid(srv.pid(), &st, WNOHANG) == srv.pid())
      status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 1) << srv.log();
  if (status != -2) srv.forget();
}

}  // namespace
}  // namespace tessera::test
