// The Anthropic Messages translation both ways, without a server: a Messages request into the chat
// request the OpenAI path parses, and the generation's events into content blocks (non-streamed)
// and Anthropic's event stream (streamed).
#include "server/anthropic_messages.h"

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace tessera::server {
namespace {

OJson parse(const char* s) { return OJson::parse(s); }

// The ApiError's param for `body` ("" when it translates).
std::string error_param(const OJson& body) {
  try {
    messages_to_chat_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "";
}

TEST(AnthropicRequest, ConversationWithToolUseResultAndThinking) {
  const OJson chat = messages_to_chat_request(parse(R"({
    "model": "m", "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 7, "stream": true,
    "stop_sequences": ["END"], "metadata": {"user_id": "u1"},
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
        {"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "get_weather"},
    "thinking": {"type": "enabled", "budget_tokens": 50}})"));
  const OJson want = parse(R"({
    "model": "m", "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 7, "stream": true, "stop": ["END"],
    "messages": [
      {"role": "system", "content": "Be brief.\nUse tools."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the tool.",
       "tool_calls": [{"id": "toolu_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
      {"role": "user", "content": "And tomorrow?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                                "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "chat_template_kwargs": {"thinking": true}, "thinking_token_budget": 50})");
  EXPECT_EQ(chat, want) << chat.dump(2);
}

TEST(AnthropicRequest, ToolResultErrorsToolChoicesAndThinkingOff) {
  const OJson chat = messages_to_chat_request(parse(R"({
    "max_tokens": 10, "thinking": {"type": "disabled"}, "tool_choice": {"type": "any"},
    "tools": [{"name": "f", "input_schema": {"type": "object"}, "type": "custom"}],
    "messages": [{"role": "user", "content": "go"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "boom",
                                               "is_error": true}]}]})"));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["chat_template_kwargs"], parse(R"({"thinking": false})"));
  EXPECT_FALSE(chat.contains("thinking_token_budget"));
  EXPECT_TRUE(chat["messages"][1]["content"].is_null());
  EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(chat["messages"][2], parse(R"({"role": "tool", "tool_call_id": "a", "content": "Error: boom"})"));
  OJson b = parse(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}], "tools": [
                      {"name": "f", "input_schema": {}}], "tool_choice": {"type": "none"}})");
  EXPECT_EQ(messages_to_chat_request(b)["tool_choice"], "none");
  b["tool_choice"] = parse(R"({"type": "auto"})");
  EXPECT_EQ(messages_to_chat_request(b)["tool_choice"], "auto");
}

TEST(AnthropicRequest, ErrorsNameTheAnthropicField) {
  const OJson ok = parse(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(error_param(ok), "");
  auto with = [&](const char* key, const char* value) {
    OJson b = ok;
    b[key] = parse(value);
    return error_param(b);
  };
  EXPECT_EQ(error_param(parse(R"({"messages": [{"role": "user", "content": "x"}]})")), "max_tokens");
  EXPECT_EQ(error_param(parse(R"({"max_tokens": 10})")), "messages");
  EXPECT_EQ(with("messages", "[]"), "messages");
  EXPECT_EQ(with("messages", R"([{"role": "system", "content": "x"}])"), "messages[0].role");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": []}])"), "messages[0].content");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": 5}])"), "messages[0].content");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": [{"type": "image", "source": {}}]}])"),
            "messages[0].content[0].type");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": [{"text": "x"}]}])"), "messages[0].content[0].type");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": [{"type": "text"}]}])"), "messages[0].content[0].text");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": "q"},
                                 {"role": "user", "content": [{"type": "tool_result", "content": "r"}]}])"),
            "messages[1].content[0].tool_use_id");
  // A tool_result must answer a tool_use of an earlier assistant turn.
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}])"),
            "messages[0].content[0].tool_use_id");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": [
                                   {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]},
                                 {"role": "user", "content": "r"}])"),
            "messages[1].content[0].input");
  EXPECT_EQ(with("messages", R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "prefill"}])"),
            "messages[1].role");
  EXPECT_EQ(with("system", R"([{"type": "image"}])"), "system[0].type");
  EXPECT_EQ(with("stop_sequences", R"("END")"), "stop_sequences");
  EXPECT_EQ(with("tools", R"([{"name": "f"}])"), "tools[0].input_schema");
  EXPECT_EQ(with("tools", R"([{"type": "web_search_20250305", "name": "web_search"}])"), "tools[0].type");
  EXPECT_EQ(with("tools", R"([{"input_schema": {}}])"), "tools[0].name");
  EXPECT_EQ(with("tool_choice", R"({"type": "auto"})"), "tool_choice");  // no tools
  EXPECT_EQ(with("tool_choice", R"({"type": "sometimes"})"), "tool_choice.type");
  EXPECT_EQ(with("thinking", R"({"type": "enabled"})"), "thinking.budget_tokens");
  EXPECT_EQ(with("thinking", R"({"type": "enabled", "budget_tokens": 10})"), "thinking.budget_tokens");  // >= max
  EXPECT_EQ(with("thinking", R"({"type": "on"})"), "thinking.type");
  OJson b = ok;
  b["tools"] = parse(R"([{"name": "f", "input_schema": {}}])");
  b["tool_choice"] = parse(R"({"type": "tool", "name": "g"})");
  EXPECT_EQ(error_param(b), "tool_choice.name");
}

TEST(AnthropicRequest, ErrorBodyShape) {
  EXPECT_EQ(
      anthropic_error_json(400, "'x' must be a string", "x"),
      parse(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "'x' must be a string"}})"));
  // A message that does not name its field gets it in front.
  EXPECT_EQ(anthropic_error_json(400, "must be positive", "thinking.budget_tokens")["error"]["message"],
            "thinking.budget_tokens: must be positive");
  EXPECT_EQ(anthropic_error_json(401, "key")["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_json(404, "m")["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error_json(429, "m")["error"]["type"], "rate_limit_error");
  EXPECT_EQ(anthropic_error_json(500, "m")["error"]["type"], "api_error");
  EXPECT_EQ(anthropic_error_json(503, "m")["error"]["type"], "overloaded_error");
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

// Splits "event: NAME\ndata: JSON\n\n" events; checks each event's name matches its data's type.
std::vector<OJson> events_of(const std::string& sse) {
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
  }
  return out;
}

TEST(AnthropicResponse, StreamOpensOneBlockPerKindInOrder) {
  MessagesStream s(ResponseMeta{"msg_1", "m", 0}, 12);
  std::string all = s.start();
  all += s.add(event("Think", ""));
  all += s.add(event("ing.", "Ans"));
  all += s.add(event("", "wer.", {call(0, "call_a", "f", "{\"x\":")}));
  all += s.add(event("", "", {call(0, nullptr, nullptr, " 1}"), call(1, "call_b", "g", "")}));
  ChoiceEvent last = event("", "", {call(1, nullptr, nullptr, "{}")});
  last.finish_reason = "tool_calls";
  all += s.add(last);
  Usage u;
  u.completion_tokens = 9;
  all += s.finish(u);
  const std::vector<OJson> ev = events_of(all);
  std::vector<std::string> types;
  for (const auto& e : ev)
    types.push_back(e["type"].get<std::string>() + (e.contains("index") ? std::to_string(e["index"].get<int>()) : ""));
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "ping", "content_block_start0", "content_block_delta0",
                                             "content_block_delta0", "content_block_stop0", "content_block_start1",
                                             "content_block_delta1", "content_block_delta1", "content_block_stop1",
                                             "content_block_start2", "content_block_delta2", "content_block_delta2",
                                             "content_block_stop2", "content_block_start3", "content_block_delta3",
                                             "content_block_stop3", "message_delta", "message_stop"}));
  EXPECT_EQ(ev[0]["message"]["id"], "msg_1");
  EXPECT_EQ(ev[0]["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(ev[2]["content_block"], parse(R"({"type": "thinking", "thinking": "", "signature": ""})"));
  EXPECT_EQ(ev[4]["delta"], parse(R"({"type": "thinking_delta", "thinking": "ing."})"));
  EXPECT_EQ(ev[7]["delta"], parse(R"({"type": "text_delta", "text": "Ans"})"));
  EXPECT_EQ(ev[10]["content_block"], parse(R"({"type": "tool_use", "id": "call_a", "name": "f", "input": {}})"));
  EXPECT_EQ(ev[11]["delta"], parse(R"({"type": "input_json_delta", "partial_json": "{\"x\":"})"));
  EXPECT_EQ(ev[12]["delta"]["partial_json"], " 1}");
  EXPECT_EQ(ev[14]["content_block"]["id"], "call_b");
  EXPECT_EQ(ev[17]["delta"], parse(R"({"stop_reason": "tool_use", "stop_sequence": null})"));
  EXPECT_EQ(ev[17]["usage"]["output_tokens"], 9);
}

TEST(AnthropicResponse, StopReasons) {
  EXPECT_EQ(anthropic_stop_reason("stop", false, std::nullopt), "end_turn");
  EXPECT_EQ(anthropic_stop_reason("stop", false, std::string("END")), "stop_sequence");
  EXPECT_EQ(anthropic_stop_reason("length", true, std::nullopt), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason("tool_calls", true, std::nullopt), "tool_use");
  EXPECT_EQ(anthropic_stop_reason("stop", true, std::nullopt), "tool_use");  // a named tool_choice
  MessagesStream s(ResponseMeta{"msg_2", "m", 0}, 1);
  ChoiceEvent ev = event("", "one ");
  ev.finish_reason = "stop";
  ev.stop_string = "END";
  s.add(ev);
  const std::vector<OJson> tail = events_of(s.finish(Usage{}));
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[0], parse(R"({"type": "content_block_stop", "index": 0})"));
  EXPECT_EQ(tail[1]["delta"], parse(R"({"stop_reason": "stop_sequence", "stop_sequence": "END"})"));
}

TEST(AnthropicResponse, NonStreamedBlocks) {
  ChoiceAccum a;
  a.reasoning = "Hmm.";
  a.content = "Here.";
  a.tool_calls[0] = text::ToolCall{"call_a", "f", R"({"x": [1, 2]})"};
  a.tool_calls[1] = text::ToolCall{"call_b", "g", "not json"};
  a.finish_reason = "tool_calls";
  Usage u;
  u.prompt_tokens = 30;
  u.completion_tokens = 20;
  const OJson r = messages_response(ResponseMeta{"msg_3", "m", 0}, a, u);
  EXPECT_EQ(r, parse(R"({"id": "msg_3", "type": "message", "role": "assistant", "model": "m", "content": [
      {"type": "thinking", "thinking": "Hmm.", "signature": ""},
      {"type": "text", "text": "Here."},
      {"type": "tool_use", "id": "call_a", "name": "f", "input": {"x": [1, 2]}},
      {"type": "tool_use", "id": "call_b", "name": "g", "input": "not json"}],
    "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 30, "output_tokens": 20}})"))
      << r.dump(2);
  ChoiceAccum plain;
  plain.content = "a";
  plain.finish_reason = "length";
  const OJson p = messages_response(ResponseMeta{"msg_4", "m", 0}, plain, u);
  EXPECT_EQ(p["stop_reason"], "max_tokens");
  EXPECT_EQ(p["content"].size(), 1u);
}

}  // namespace
}  // namespace tessera::server
