// The OpenAI Responses API translation both ways, without a server: a Responses request into the
// chat request the chat path parses, and the generation's events into output items (non-streamed)
// and the response.* event stream (streamed).
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_responses.h"

namespace tessera::server {
namespace {

OJson parse(const char* s) { return OJson::parse(s); }

// The ApiError's param for `body` ("" when it translates).
std::string error_param(const OJson& body) {
  try {
    responses_to_chat_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "";
}

TEST(ResponsesRequest, StringInputAndInstructions) {
  const OJson chat = responses_to_chat_request(parse(R"({
    "model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.5,
    "top_p": 0.9, "stream": true, "store": false, "user": "u", "metadata": {"k": "v"}, "parallel_tool_calls": true,
    "truncation": "disabled", "include": [], "text": {"format": {"type": "text"}}, "reasoning": {"effort": null}})"));
  EXPECT_EQ(chat, parse(R"({"model": "m", "max_tokens": 50, "temperature": 0.5, "top_p": 0.9, "stream": true,
                             "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}]})"))
      << chat.dump(2);
}

TEST(ResponsesRequest, ItemsToolsToolChoiceAndEffort) {
  const OJson chat = responses_to_chat_request(parse(R"({
    "input": [
      {"role": "developer", "content": "Use tools."},
      {"role": "user", "content": [{"type": "input_text", "text": "Weather in"}, {"type": "input_text", "text": "Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need the tool."}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"role": "user", "content": "And tomorrow?"}],
    "tools": [{"type": "function", "name": "get_weather", "description": "weather",
               "parameters": {"type": "object"}, "strict": true},
              {"type": "function", "name": "get_time"}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "reasoning": {"effort": "low", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}}})"));
  const OJson want = parse(R"({
    "messages": [
      {"role": "developer", "content": "Use tools."},
      {"role": "user", "content": "Weather in\nParis?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
      {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
      {"role": "user", "content": "And tomorrow?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                                "parameters": {"type": "object"}, "strict": true}},
              {"type": "function", "function": {"name": "get_time"}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "reasoning_effort": "low",
    "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}}})");
  EXPECT_EQ(chat, want) << chat.dump(2);
}

TEST(ResponsesRequest, FunctionCallWithoutTextAndStringToolChoices) {
  OJson b = parse(R"({"input": [
      {"role": "user", "content": "go"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
      {"type": "function_call", "call_id": "a", "name": "f", "arguments": ""},
      {"type": "function_call_output", "call_id": "a", "output": "boom"}],
    "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"})");
  OJson chat = responses_to_chat_request(b);
  EXPECT_EQ(chat["messages"][1], parse(R"({"role": "assistant", "content": null, "reasoning_content": "",
      "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}]})"));
  EXPECT_EQ(chat["tool_choice"], "required");
  for (const char* tc : {"auto", "none"}) {
    b["tool_choice"] = tc;
    EXPECT_EQ(responses_to_chat_request(b)["tool_choice"], tc);
  }
  // A user turn between an assistant message and a call: the call gets its own assistant message.
  chat = responses_to_chat_request(parse(R"({"input": [
      {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})"));
  ASSERT_EQ(chat["messages"].size(), 3u);
  EXPECT_EQ(chat["messages"][2]["role"], "assistant");
  EXPECT_TRUE(chat["messages"][2]["content"].is_null());
}

TEST(ResponsesRequest, ErrorsNameTheResponsesField) {
  const OJson ok = parse(R"({"input": "x"})");
  EXPECT_EQ(error_param(ok), "");
  auto with = [&](const char* key, const char* value) {
    OJson b = ok;
    b[key] = parse(value);
    return error_param(b);
  };
  EXPECT_EQ(error_param(parse(R"({"model": "m"})")), "input");
  EXPECT_EQ(with("input", "[]"), "input");
  EXPECT_EQ(with("input", "5"), "input");
  EXPECT_EQ(with("input", "[5]"), "input[0]");
  EXPECT_EQ(with("input", R"([{"role": "tool", "content": "x"}])"), "input[0].role");
  EXPECT_EQ(with("input", R"([{"role": "user"}])"), "input[0].content");
  EXPECT_EQ(with("input", R"([{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}])"),
            "input[0].content[0].type");
  EXPECT_EQ(with("input", R"([{"role": "user", "content": [{"type": "input_text"}]}])"), "input[0].content[0].text");
  EXPECT_EQ(with("input", R"([{"type": "function_call", "name": "f", "arguments": "{}"}])"), "input[0].call_id");
  EXPECT_EQ(with("input", R"([{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}])"),
            "input[0].arguments");
  EXPECT_EQ(with("input", R"([{"type": "function_call_output", "call_id": "nope", "output": "r"}])"),
            "input[0].call_id");
  EXPECT_EQ(with("input", R"([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                              {"type": "function_call_output", "call_id": "c"}])"),
            "input[1].output");
  EXPECT_EQ(with("input", R"([{"type": "item_reference", "id": "msg_1"}])"), "input[0].type");
  EXPECT_EQ(with("input", R"([{"type": "web_search_call", "id": "w"}])"), "input[0].type");
  EXPECT_EQ(with("instructions", "[]"), "instructions");
  EXPECT_EQ(with("tools", R"({})"), "tools");
  EXPECT_EQ(with("tools", R"([{"type": "web_search_preview"}])"), "tools[0].type");
  EXPECT_EQ(with("tools", R"([{"type": "function"}])"), "tools[0].name");
  EXPECT_EQ(with("tools", R"([{"type": "function", "name": "f", "parameters": "x"}])"), "tools[0].parameters");
  EXPECT_EQ(with("tools", R"([{"type": "function", "name": "f", "strict": "yes"}])"), "tools[0].strict");
  EXPECT_EQ(with("tool_choice", R"("sometimes")"), "tool_choice");
  EXPECT_EQ(with("tool_choice", R"({"type": "file_search"})"), "tool_choice.type");
  EXPECT_EQ(with("tool_choice", R"({"type": "function"})"), "tool_choice.name");
  EXPECT_EQ(with("reasoning", R"("high")"), "reasoning");
  EXPECT_EQ(with("reasoning", R"({"effort": 3})"), "reasoning.effort");
  EXPECT_EQ(with("text", R"({"format": {"type": "xml"}})"), "text.format.type");
  EXPECT_EQ(with("text", R"({"format": {"type": "json_schema", "name": "n"}})"), "text.format.schema");
  EXPECT_EQ(with("text", R"({"verbosity": "loud"})"), "text.verbosity");
  EXPECT_EQ(with("previous_response_id", R"("resp_1")"), "previous_response_id");
  EXPECT_EQ(with("conversation", R"("conv_1")"), "conversation");
  EXPECT_EQ(with("background", "true"), "background");
  EXPECT_EQ(with("truncation", R"("auto")"), "truncation");
  EXPECT_EQ(with("store", R"("no")"), "store");
  EXPECT_EQ(with("metadata", R"({"k": 1})"), "metadata.k");
  EXPECT_EQ(with("include", R"("x")"), "include");
  EXPECT_EQ(with("parallel_tool_calls", "1"), "parallel_tool_calls");
  EXPECT_EQ(with("max_tokens", "5"), "max_tokens");  // a chat field, not a Responses one
  EXPECT_EQ(with("messages", "[]"), "messages");
  EXPECT_EQ(with("frobnicate", "1"), "frobnicate");
  // Null is "not given", as everywhere.
  EXPECT_EQ(with("previous_response_id", "null"), "");
  EXPECT_EQ(with("frobnicate", "null"), "");
}

TEST(ResponsesRequest, EchoedSettings) {
  GenerationJob job;
  job.params.temperature = 1.0f;
  job.params.top_p = 1.0f;
  OJson e = responses_echo(parse(R"({"input": "x"})"), job);
  EXPECT_EQ(e, parse(R"({"instructions": null, "max_output_tokens": null, "parallel_tool_calls": true,
      "previous_response_id": null, "reasoning": {"effort": null, "summary": null}, "store": false,
      "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
      "top_p": 1.0, "truncation": "disabled", "user": null, "metadata": {}})"))
      << e.dump(2);
  e = responses_echo(parse(R"({"input": "x", "instructions": "I", "max_output_tokens": 9, "temperature": 0.3,
      "reasoning": {"effort": "low"}, "tools": [{"type": "function", "name": "f"}], "tool_choice": "none",
      "store": true, "metadata": {"a": "b"}, "text": {"verbosity": "low"}})"),
                     job);
  EXPECT_EQ(e["instructions"], "I");
  EXPECT_EQ(e["max_output_tokens"], 9);
  EXPECT_EQ(e["temperature"], 0.3);
  EXPECT_EQ(e["reasoning"], parse(R"({"effort": "low", "summary": null})"));
  EXPECT_EQ(e["tools"], parse(R"([{"type": "function", "name": "f"}])"));
  EXPECT_EQ(e["tool_choice"], "none");
  EXPECT_EQ(e["store"], false);  // nothing is stored
  EXPECT_EQ(e["metadata"], parse(R"({"a": "b"})"));
  EXPECT_EQ(e["text"], parse(R"({"format": {"type": "text"}, "verbosity": "low"})"));
}

ChoiceEvent event(const char* reasoning, const char* content, std::vector<text::ToolCallDelta> calls = {}) {
  ChoiceEvent ev;
  ev.delta.reasoning = reasoning;
  ev.delta.content = content;
  ev.delta.tool_calls = std::move(calls);
  return ev;
}

text::ToolCallDelta call(int64_t index, const char* id, const char* name, const char* args) {
  text::ToolCallDelta d;
  d.index = index;
  if (id) d.id = id;
  if (name) d.name = name;
  d.arguments = args;
  return d;
}

// Splits "event: NAME\ndata: JSON\n\n" events; checks each event's name matches its data's type
// and the sequence numbers count up from 0.
std::vector<OJson> events_of(const std::string& sse, int64_t first = 0) {
  std::vector<OJson> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.push_back(OJson::parse(ev.substr(nl + 7)));
    EXPECT_EQ(out.back()["type"], ev.substr(7, nl - 7));
    EXPECT_EQ(out.back()["sequence_number"], first + static_cast<int64_t>(out.size()) - 1) << ev;
  }
  return out;
}

const ResponseMeta kMeta{"resp_1a", "m", 1700000000};

TEST(ResponsesStream, ItemsInOrderWithNumberedEvents) {
  ResponsesStream s(kMeta, OJson{{"store", false}});
  std::string all = s.start();
  all += s.add(event("Think", ""));
  all += s.add(event("ing.", "Ans"));
  all += s.add(event("", "wer.", {call(0, "call_a", "f", "{\"x\":")}));
  all += s.add(event("", "", {call(0, nullptr, nullptr, " 1}"), call(1, "call_b", "g", "")}));
  ChoiceEvent last = event("", "", {call(1, nullptr, nullptr, "{}")});
  last.finish_reason = "tool_calls";
  all += s.add(last);
  Usage u;
  u.prompt_tokens = 12;
  u.completion_tokens = 9;
  u.reasoning_tokens = 2;
  all += s.finish(u);
  const std::vector<OJson> ev = events_of(all);
  std::vector<std::string> types;
  for (const auto& e : ev)
    types.push_back(e["type"].get<std::string>() +
                    (e.contains("output_index") ? std::to_string(e["output_index"].get<int>()) : ""));
  EXPECT_EQ(types, (std::vector<std::string>{"response.created",
                                             "response.in_progress",
                                             "response.output_item.added0",
                                             "response.content_part.added0",
                                             "response.reasoning_text.delta0",
                                             "response.reasoning_text.delta0",
                                             "response.reasoning_text.done0",
                                             "response.content_part.done0",
                                             "response.output_item.done0",
                                             "response.output_item.added1",
                                             "response.content_part.added1",
                                             "response.output_text.delta1",
                                             "response.output_text.delta1",
                                             "response.output_text.done1",
                                             "response.content_part.done1",
                                             "response.output_item.done1",
                                             "response.output_item.added2",
                                             "response.function_call_arguments.delta2",
                                             "response.function_call_arguments.delta2",
                                             "response.function_call_arguments.done2",
                                             "response.output_item.done2",
                                             "response.output_item.added3",
                                             "response.function_call_arguments.delta3",
                                             "response.function_call_arguments.done3",
                                             "response.output_item.done3",
                                             "response.completed"}));
  EXPECT_EQ(ev[0]["response"]["id"], "resp_1a");
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_TRUE(ev[0]["response"]["output"].empty());
  EXPECT_TRUE(ev[0]["response"]["usage"].is_null());
  EXPECT_EQ(ev[0]["response"]["store"], false);
  EXPECT_EQ(ev[2]["item"], parse(R"({"type": "reasoning", "id": "rs_1a_0", "summary": [], "content": []})"));
  EXPECT_EQ(ev[5], parse(R"({"type": "response.reasoning_text.delta", "sequence_number": 5, "item_id": "rs_1a_0",
                            "output_index": 0, "content_index": 0, "delta": "ing."})"));
  EXPECT_EQ(ev[6]["text"], "Thinking.");
  EXPECT_EQ(ev[9]["item"], parse(R"({"type": "message", "id": "msg_1a_1", "status": "in_progress",
                                    "role": "assistant", "content": []})"));
  EXPECT_EQ(ev[10]["part"], parse(R"({"type": "output_text", "text": "", "annotations": []})"));
  EXPECT_EQ(ev[11]["delta"], "Ans");
  EXPECT_EQ(ev[11]["item_id"], "msg_1a_1");
  EXPECT_EQ(ev[13]["text"], "Answer.");
  EXPECT_EQ(ev[15]["item"], parse(R"({"type": "message", "id": "msg_1a_1", "status": "completed", "role": "assistant",
      "content": [{"type": "output_text", "text": "Answer.", "annotations": []}]})"));
  EXPECT_EQ(ev[16]["item"], parse(R"({"type": "function_call", "id": "fc_1a_2", "call_id": "call_a", "name": "f",
                                     "arguments": "", "status": "in_progress"})"));
  EXPECT_EQ(ev[17], parse(R"({"type": "response.function_call_arguments.delta", "sequence_number": 17,
                             "item_id": "fc_1a_2", "output_index": 2, "delta": "{\"x\":"})"));
  EXPECT_EQ(ev[19]["arguments"], "{\"x\": 1}");
  EXPECT_EQ(ev[20]["item"]["arguments"], "{\"x\": 1}");
  EXPECT_EQ(ev[20]["item"]["status"], "completed");
  EXPECT_EQ(ev[21]["item"]["call_id"], "call_b");
  const OJson& r = ev.back()["response"];
  EXPECT_EQ(r["status"], "completed");
  EXPECT_TRUE(r["incomplete_details"].is_null());
  EXPECT_EQ(r["usage"], parse(R"({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 21})"));
  ASSERT_EQ(r["output"].size(), 4u);
  EXPECT_EQ(r["output"][0]["content"], parse(R"([{"type": "reasoning_text", "text": "Thinking."}])"));
  EXPECT_EQ(r["output"][1], ev[15]["item"]);
  EXPECT_EQ(r["output"][3]["arguments"], "{}");
  // The non-streamed response from the same events: the same output and usage.
  ChoiceAccum a;
  a.reasoning = "Thinking.";
  a.content = "Answer.";
  a.tool_calls[0] = text::ToolCall{"call_a", "f", "{\"x\": 1}"};
  a.tool_calls[1] = text::ToolCall{"call_b", "g", "{}"};
  a.finish_reason = "tool_calls";
  EXPECT_EQ(responses_response(kMeta, OJson{{"store", false}}, a, u), r);
}

TEST(ResponsesStream, MaxOutputTokensIsIncomplete) {
  ResponsesStream s(kMeta, OJson::object());
  std::string all = s.start();
  ChoiceEvent ev = event("", "cut sho");
  ev.finish_reason = "length";
  all += s.add(ev);
  const std::vector<OJson> events = events_of(all + s.finish(Usage{}));
  const OJson& r = events.back()["response"];
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  ChoiceAccum a;
  a.content = "cut sho";
  a.finish_reason = "length";
  EXPECT_EQ(responses_response(kMeta, OJson::object(), a, Usage{}), r);

  // A tool call the limit cut is incomplete in the stream (its deltas went out).
  ResponsesStream t(kMeta, OJson::object());
  t.start();
  ChoiceEvent c = event("", "", {call(0, "call_a", "f", "{\"x\"")});
  c.finish_reason = "length";
  c.complete_tool_calls = 0;
  t.add(c);
  const std::vector<OJson> tail = events_of(t.finish(Usage{}), 4);
  EXPECT_EQ(tail[tail.size() - 2]["item"]["status"], "incomplete");
  EXPECT_EQ(tail.back()["response"]["status"], "incomplete");
}

TEST(ResponsesStream, ErrorEventKeepsNumbering) {
  ResponsesStream s(kMeta, OJson::object());
  std::string all = s.start();
  all += s.error(500, "the engine failed");
  const std::vector<OJson> ev = events_of(all);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2], parse(R"({"type": "error", "sequence_number": 2, "code": "internal_error",
                            "message": "the engine failed", "param": null})"));
}

TEST(ResponsesResponse, NonStreamedItemsAndIds) {
  ChoiceAccum a;
  a.content = "Hello.";
  a.finish_reason = "stop";
  Usage u;
  u.prompt_tokens = 3;
  u.completion_tokens = 2;
  u.cached_tokens = 1;
  const OJson r = responses_response(kMeta, OJson{{"metadata", OJson::object()}}, a, u);
  EXPECT_EQ(r, parse(R"({"id": "resp_1a", "object": "response", "created_at": 1700000000, "status": "completed",
      "error": null, "incomplete_details": null, "model": "m",
      "output": [{"type": "message", "id": "msg_1a_0", "status": "completed", "role": "assistant",
                  "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}],
      "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 1}, "output_tokens": 2,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5},
      "metadata": {}})"))
      << r.dump(2);
  EXPECT_EQ(output_item_id(ResponseMeta{"plain", "m", 0}, "fc", 3), "fc_plain_3");
}

}  // namespace
}  // namespace tessera::server
