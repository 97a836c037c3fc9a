// The OpenAI Responses API (POST /v1/responses) through `tessera serve` on the demo model, with
// scripted output (tessera_script) so reasoning and tool calls are deterministic: output items,
// status and usage, the event stream (in order, numbered) against the non-streamed answer,
// max_output_tokens -> incomplete, a function_call / function_call_output round trip rendered as
// its chat twin, errors in OpenAI's shape naming the Responses field, 405 and an engine failure
// mid-stream.
#include <gtest/gtest.h>

#include <sys/wait.h>

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
    {"type": "function", "name": "get_weather", "description": "weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}])");
}

Json tool_request(bool stream) {
  return Json{{"model", "tessera-demo-dsv3-random-weights"},
              {"max_output_tokens", 200},
              {"stream", stream},
              {"input", "Weather in Paris?"},
              {"tools", tools()},
              {"reasoning", {{"effort", "high"}}},
              {"tessera_script", kToolScript}};
}

httplib::Result post_responses(httplib::Client& c, const Json& body) {
  return c.Post("/v1/responses", body.dump(), "application/json");
}

// The events of a Responses SSE body: each "event: TYPE\ndata: JSON" with TYPE its type and
// sequence numbers counting up from 0; SSE comments (keep-alives) are skipped.
std::vector<Json> response_events(const std::string& body) {
  std::vector<Json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(":", 0) == 0) continue;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    Json j = Json::parse(ev.substr(nl + 7));
    EXPECT_EQ(j["type"], ev.substr(7, nl - 7));
    EXPECT_EQ(j["sequence_number"], out.size()) << ev;
    out.push_back(std::move(j));
  }
  return out;
}

// Rebuilds the response from its events as a client does, checking their order on the way: the
// final response.completed / response.incomplete must hold the same output as the deltas built.
Json assemble(const std::vector<Json>& events, std::string* text = nullptr) {
  EXPECT_GE(events.size(), 3u);
  if (events.size() < 3) return Json();
  EXPECT_EQ(events[0]["type"], "response.created");
  EXPECT_EQ(events[1]["type"], "response.in_progress");
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  Json output = Json::array();
  int open = -1;
  std::string deltas;
  for (size_t i = 2; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    const std::string type = e["type"];
    if (type == "response.output_item.added") {
      EXPECT_EQ(open, -1) << "an item was added before the last one was done";
      open = e["output_index"];
      EXPECT_EQ(open, static_cast<int>(output.size()));
      output.push_back(e["item"]);
      continue;
    }
    EXPECT_EQ(e["output_index"], open) << e.dump();
    if (open < 0) continue;
    Json& item = output[static_cast<size_t>(open)];
    if (type != "response.output_item.done") {
      EXPECT_EQ(e["item_id"], item["id"]) << e.dump();
    }
    if (type == "response.content_part.added") {
      EXPECT_EQ(e["content_index"], item["content"].size());
      item["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
      EXPECT_EQ(item["type"], type == "response.output_text.delta" ? "message" : "reasoning");
      Json& part = item["content"][e["content_index"].get<size_t>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
      if (item["type"] == "message") deltas += e["delta"].get<std::string>();
    } else if (type == "response.function_call_arguments.delta") {
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.output_text.done" || type == "response.reasoning_text.done") {
      EXPECT_EQ(e["text"], item["content"][e["content_index"].get<size_t>()]["text"]);
    } else if (type == "response.content_part.done") {
      EXPECT_EQ(e["part"], item["content"][e["content_index"].get<size_t>()]);
    } else if (type == "response.function_call_arguments.done") {
      EXPECT_EQ(e["arguments"], item["arguments"]);
    } else if (type == "response.output_item.done") {
      EXPECT_EQ(e["item"]["id"], item["id"]);
      item = e["item"];  // the status is final here
      open = -1;
    } else {
      ADD_FAILURE() << "unexpected event " << e.dump();
    }
  }
  EXPECT_EQ(open, -1);
  const Json& last = events.back();
  EXPECT_TRUE(last["type"] == "response.completed" || last["type"] == "response.incomplete") << last.dump();
  EXPECT_EQ(last["type"], "response." + last["response"]["status"].get<std::string>());
  EXPECT_EQ(last["response"]["output"], output);
  if (text) *text = deltas;
  return last["response"];
}

// Item ids and call ids are per response, cached tokens per server state: left out to compare two
// responses.
Json without_ids(Json r) {
  for (auto& item : r["output"]) {
    item["id"] = item["type"];
    if (item.contains("call_id")) item["call_id"] = !item["call_id"].get<std::string>().empty();
  }
  r.erase("id");
  r.erase("created_at");
  // The second of two equal requests finds the prompt in the prefix cache.
  if (r["usage"].is_object()) r["usage"]["input_tokens_details"]["cached_tokens"] = 0;
  return r;
}

TEST(ServerResponses, ReasoningTextAndFunctionCallsStreamedAndNot) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_responses(c, tool_request(false));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const Json m = Json::parse(r->body);
  const std::string id = m["id"];
  EXPECT_EQ(id.rfind("resp_", 0), 0u) << id;
  EXPECT_EQ(m["object"], "response");
  EXPECT_EQ(m["status"], "completed");
  EXPECT_TRUE(m["incomplete_details"].is_null());
  EXPECT_TRUE(m["error"].is_null());
  EXPECT_EQ(m["model"], "tessera-demo-dsv3-random-weights");
  EXPECT_GT(m["created_at"].get<int64_t>(), 1700000000);
  ASSERT_EQ(m["output"].size(), 4u) << m.dump(2);
  const Json& out = m["output"];
  const std::string tail = id.substr(5);
  EXPECT_EQ(out[0], Json::parse(R"({"type": "reasoning", "id": "rs_)" + tail + R"(_0", "summary": [],
                                    "content": [{"type": "reasoning_text", "text": "Need the weather."}]})"));
  EXPECT_EQ(out[1], Json::parse(R"({"type": "message", "id": "msg_)" + tail + R"(_1", "status": "completed",
      "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]})"));
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["id"], "fc_" + tail + "_2");
  EXPECT_EQ(out[2]["name"], "get_weather");
  EXPECT_EQ(Json::parse(out[2]["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris", "days": [1, 2]})"));
  EXPECT_EQ(out[2]["status"], "completed");
  EXPECT_EQ(out[2]["call_id"].get<std::string>().rfind("call_", 0), 0u) << out[2];
  EXPECT_EQ(out[3]["name"], "get_time");
  EXPECT_EQ(out[3]["arguments"], "{}");
  EXPECT_NE(out[2]["call_id"], out[3]["call_id"]);
  const Json& u = m["usage"];
  EXPECT_GT(u["input_tokens"].get<int>(), 5);
  EXPECT_GT(u["output_tokens"].get<int>(), 10);
  EXPECT_GT(u["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  EXPECT_LT(u["output_tokens_details"]["reasoning_tokens"], u["output_tokens"]);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int>() + u["output_tokens"].get<int>());
  EXPECT_TRUE(u["input_tokens_details"]["cached_tokens"].is_number());
  // The settings are echoed.
  EXPECT_EQ(m["tools"], tools());
  EXPECT_EQ(m["tool_choice"], "auto");
  EXPECT_EQ(m["max_output_tokens"], 200);
  EXPECT_EQ(m["reasoning"], Json::parse(R"({"effort": "high", "summary": null})"));
  EXPECT_EQ(m["store"], false);
  EXPECT_TRUE(m["previous_response_id"].is_null());
  EXPECT_EQ(m["text"], Json::parse(R"({"format": {"type": "text"}})"));

  auto s = post_responses(c, tool_request(true));
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(s->body.find("[DONE]"), std::string::npos);
  const std::vector<Json> events = response_events(s->body);
  const Json streamed = assemble(events);
  EXPECT_NE(streamed["id"], m["id"]);
  EXPECT_EQ(without_ids(streamed), without_ids(m)) << s->body;
  // Arguments stream as several deltas, not one blob at the end.
  int arg_deltas = 0;
  for (const auto& e : events)
    if (e["type"] == "response.function_call_arguments.delta") ++arg_deltas;
  EXPECT_GE(arg_deltas, 3);
}

TEST(ServerResponses, TextStreamedEqualsNonStreamedAndMaxOutputTokensIsIncomplete) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  // Greedy on the random model, no script: whatever it writes, the deltas add up to the text.
  Json b{{"input", Json::parse(R"([{"role": "user", "content": [{"type": "input_text", "text": "Hello there"}]}])")},
         {"instructions", "Be brief."},
         {"max_output_tokens", 12},
         {"temperature", 0},
         {"reasoning", {{"effort", "none"}}}};
  auto r = post_responses(c, b);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json m = Json::parse(r->body);
  EXPECT_EQ(m["instructions"], "Be brief.");
  EXPECT_EQ(m["temperature"], 0);
  b["stream"] = true;
  auto s = post_responses(c, b);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  std::string deltas;
  const Json streamed = assemble(response_events(s->body), &deltas);
  EXPECT_EQ(without_ids(streamed), without_ids(m)) << s->body;
  std::string text;
  for (const auto& item : m["output"])
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
  EXPECT_EQ(deltas, text);
  EXPECT_LE(m["usage"]["output_tokens"], 12);
  EXPECT_EQ(m["usage"]["output_tokens_details"]["reasoning_tokens"], 0);

  // Scripted text cut by max_output_tokens: status incomplete, the message too.
  Json cut{{"input", "count"},
           {"max_output_tokens", 2},
           {"reasoning", {{"effort", "none"}}},
           {"tessera_script", "one two three four five" + kEos}};
  for (bool stream : {false, true}) {
    cut["stream"] = stream;
    auto x = post_responses(c, cut);
    ASSERT_TRUE(x);
    ASSERT_EQ(x->status, 200) << x->body;
    const Json j = stream ? assemble(response_events(x->body)) : Json::parse(x->body);
    EXPECT_EQ(j["status"], "incomplete") << stream;
    EXPECT_EQ(j["incomplete_details"], Json::parse(R"({"reason": "max_output_tokens"})")) << stream;
    EXPECT_EQ(j["usage"]["output_tokens"], 2) << stream;
    ASSERT_EQ(j["output"].size(), 1u) << j.dump();
    EXPECT_EQ(j["output"][0]["status"], "incomplete") << stream;
    const std::string text = j["output"][0]["content"][0]["text"];
    EXPECT_FALSE(text.empty()) << stream;
    EXPECT_EQ(std::string("one two three four five").rfind(text, 0), 0u) << text;
  }
  // The whole script: completed.
  cut["max_output_tokens"] = 40;
  cut["stream"] = false;
  auto full = post_responses(c, cut);
  ASSERT_TRUE(full);
  const Json fj = Json::parse(full->body);
  EXPECT_EQ(fj["status"], "completed") << full->body;
  EXPECT_EQ(fj["output"][0]["content"][0]["text"], "one two three four five");
}

// A function_call and its function_call_output in the next request's input render as the chat
// twin's assistant tool_calls and tool message: the same prompt, and the answer.
TEST(ServerResponses, FunctionCallOutputRoundTripRendersLikeTheChatTwin) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto first = post_responses(c, tool_request(false));
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const Json r1 = Json::parse(first->body);
  // The next request: the earlier input, the model's output items as they came, the results.
  Json input = Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}});
  for (const auto& item : r1["output"]) input.push_back(item);
  input.push_back(Json{{"type", "function_call_output"}, {"call_id", r1["output"][2]["call_id"]}, {"output", "18C"}});
  input.push_back(Json{{"type", "function_call_output"}, {"call_id", r1["output"][3]["call_id"]}, {"output", "noon"}});
  Json b{
      {"input", input},          {"instructions", "Be brief."},       {"tools", tools()},
      {"max_output_tokens", 30}, {"reasoning", {{"effort", "none"}}}, {"tessera_script", "It is 18C in Paris." + kEos}};
  auto second = post_responses(c, b);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  const Json r2 = Json::parse(second->body);
  ASSERT_EQ(r2["output"].size(), 1u) << r2.dump(2);
  EXPECT_EQ(r2["output"][0]["content"][0]["text"], "It is 18C in Paris.");

  // Keys in the order the translation writes them (a template that renders tools as JSON would
  // count the order in the prompt).
  using OJson = nlohmann::ordered_json;
  OJson twin{{"max_tokens", 30},
             {"reasoning_effort", "none"},
             {"tessera_script", "It is 18C in Paris." + kEos},
             {"messages", OJson::array()},
             {"tools", OJson::array()}};
  for (const auto& t : tools()) {
    OJson f{{"name", t["name"]}};
    if (t.contains("description")) f["description"] = t["description"];
    f["parameters"] = OJson::parse(t["parameters"].dump());
    twin["tools"].push_back(OJson{{"type", "function"}, {"function", std::move(f)}});
  }
  OJson calls = OJson::array();
  for (size_t i : {2u, 3u})
    calls.push_back(
        OJson{{"id", r1["output"][i]["call_id"]},
              {"type", "function"},
              {"function", {{"name", r1["output"][i]["name"]}, {"arguments", r1["output"][i]["arguments"]}}}});
  twin["messages"] = OJson::array({OJson{{"role", "system"}, {"content", "Be brief."}},
                                   OJson{{"role", "user"}, {"content", "Weather in Paris?"}},
                                   OJson{{"role", "assistant"},
                                         {"content", "Checking."},
                                         {"reasoning_content", "Need the weather."},
                                         {"tool_calls", calls}},
                                   OJson{{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", "18C"}},
                                   OJson{{"role", "tool"}, {"tool_call_id", calls[1]["id"]}, {"content", "noon"}}});
  auto o = post_json(c, "/v1/chat/completions", twin.dump());
  ASSERT_TRUE(o);
  ASSERT_EQ(o->status, 200) << o->body;
  const Json oj = Json::parse(o->body);
  EXPECT_EQ(r2["usage"]["input_tokens"], oj["usage"]["prompt_tokens"]);
  EXPECT_EQ(r2["output"][0]["content"][0]["text"], oj["choices"][0]["message"]["content"]);

  // The result reaches the prompt: a longer one makes a longer prompt.
  b["input"][5]["output"] = "18C, sunny, light wind from the west";
  auto longer = post_responses(c, b);
  ASSERT_TRUE(longer);
  ASSERT_EQ(longer->status, 200) << longer->body;
  EXPECT_GT(Json::parse(longer->body)["usage"]["input_tokens"].get<int>(), r2["usage"]["input_tokens"].get<int>());
}

TEST(ServerResponses, ErrorsAreOpenAiShapedAndNameTheField) {
  ServerProcess srv({"--api-key", "sekret"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  const httplib::Headers key = {{"Authorization", "Bearer sekret"}};
  const Json good{{"input", "hi"}, {"max_output_tokens", 4}};
  auto ok = c.Post("/v1/responses", key, good.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto nokey = c.Post("/v1/responses", good.dump(), "application/json");
  ASSERT_TRUE(nokey);
  EXPECT_EQ(nokey->status, 401);
  EXPECT_EQ(Json::parse(nokey->body)["error"]["type"], "authentication_error");

  struct Case {
    std::string name;
    Json patch;  // merged into `good`
    int status;
    std::string param;  // error.param, also in error.message
  };
  const std::vector<Case> cases = {
      {"input missing", {{"input", nullptr}}, 400, "input"},
      {"max_output_tokens zero", {{"max_output_tokens", 0}}, 400, "max_output_tokens"},
      {"max_output_tokens past the context", {{"max_output_tokens", 1 << 30}}, 400, "max_output_tokens"},
      {"previous_response_id", {{"previous_response_id", "resp_1"}}, 400, "previous_response_id"},
      {"hosted tool", {{"tools", Json::parse(R"([{"type": "web_search_preview"}])")}}, 400, "tools[0].type"},
      {"tool parameters",
       {{"tools", Json::parse(R"([{"type": "function", "name": "f", "parameters": 1}])")}},
       400,
       "tools[0].parameters"},
      {"tool_choice without tools", {{"tool_choice", "required"}}, 400, "tool_choice"},
      {"reasoning effort", {{"reasoning", {{"effort", "extreme"}}}}, 400, "reasoning.effort"},
      {"json_schema format outside the supported subset",
       {{"text", Json::parse(R"({"format": {"type": "json_schema", "name": "n",
         "schema": {"type": "string", "pattern": "a+"}}})")}},
       400,
       "text.format"},
      {"unknown field", {{"frequency_penalty", 1}}, 400, "frequency_penalty"},
      {"temperature out of range", {{"temperature", 5}}, 400, "temperature"},
      {"image",
       {{"input", Json::parse(R"([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])")}},
       400,
       "input[0].content[0].type"},
      {"unanswered call output",
       {{"input", Json::parse(R"([{"type": "function_call_output", "call_id": "c", "output": "x"}])")}},
       400,
       "input[0].call_id"},
      {"unknown model", {{"model", "gpt-4o"}}, 404, "model"},
  };
  for (const auto& k : cases) {
    Json b = good;
    b.merge_patch(k.patch);
    auto r = c.Post("/v1/responses", key, b.dump(), "application/json");
    ASSERT_TRUE(r) << k.name;
    EXPECT_EQ(r->status, k.status) << k.name << ": " << r->body;
    const Json e = Json::parse(r->body);
    ASSERT_TRUE(e.contains("error")) << k.name << ": " << r->body;
    EXPECT_EQ(e["error"]["param"], k.param) << k.name << ": " << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(k.param == "model" ? "gpt-4o" : k.param), std::string::npos)
        << k.name << ": " << r->body;
    EXPECT_TRUE(e["error"]["code"].is_string()) << k.name;
  }
  auto get = c.Get("/v1/responses", key);
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST, OPTIONS");
  EXPECT_EQ(Json::parse(get->body)["error"]["type"], "invalid_request_error");
  // The server still answers.
  auto again = c.Post("/v1/responses", key, good.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

// The engine fails after the stream began (--test-fail-token): the stream ends with an `error`
// event, not response.completed, and the server exits 1 on its own.
TEST(ServerResponses, EngineFailureMidStreamIsAnErrorEvent) {
  ServerProcess srv({"--test-fail-token", "4242"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(30, 0);
  const Json b{{"max_output_tokens", 10},
               {"stream", true},
               {"input", "hi"},
               {"reasoning", {{"effort", "none"}}},
               {"tessera_script", Json::array({100, 101, 4242, 102})}};
  auto r = post_responses(c, b);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<Json> events = response_events(r->body);
  ASSERT_GE(events.size(), 3u) << r->body;
  EXPECT_EQ(events.front()["type"], "response.created");
  EXPECT_EQ(events.back()["type"], "error") << r->body;
  EXPECT_EQ(events.back()["message"], "the engine failed while generating this request");
  EXPECT_EQ(events.back()["code"], "internal_error");
  for (const auto& e : events) EXPECT_NE(e["type"], "response.completed");
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
