// Every field of a chat / completion request replaced by values of every JSON type (and edge
// numbers): request parsing must answer with an ApiError (a 4xx) or a job, never another exception
// (which would be a 500) or a crash. Deterministic and bounded (a few thousand bodies).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/demo_model.h"
#include "server/openai_responses.h"
#include "server/request_parse.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::server {
namespace {

using OJson = nlohmann::ordered_json;

const ServedModel& demo() {
  static ServedModel m = [] {
    ServedModelOptions o;
    o.model_dir = ensure_demo_model(test::server_test_demo_dir(), test::fixtures_dir() / "tokenizers" / "deepseek-v3");
    o.served_name = kDemoModelName;
    o.vocab_size = 129280;
    o.max_model_len = 512;
    return load_served_model(o);
  }();
  return m;
}

std::vector<OJson> odd_values() {
  return {nullptr,
          true,
          false,
          0,
          -1,
          1,
          3,
          1000000,
          INT64_MAX,
          INT64_MIN,
          UINT64_MAX,
          0.5,
          -0.5,
          1e308,
          -1e308,
          "",
          "x",
          "none",
          "auto",
          "<｜tool▁calls▁begin｜>",
          OJson::array(),
          OJson::array({1, 2}),
          OJson::array({"a"}),
          OJson::array({OJson::object()}),
          OJson::object(),
          OJson{{"type", "text"}},
          OJson{{"type", "function"}, {"function", {{"name", "f"}}}},
          OJson{{"include_usage", "yes"}}};
}

void expect_only_api_errors(const OJson& base, bool chat) {
  ParseLimits lim;
  lim.allow_test_script = true;
  std::vector<std::string> keys;
  for (auto it = base.begin(); it != base.end(); ++it) keys.push_back(it.key());
  for (const char* k : {"n",
                        "stop",
                        "logprobs",
                        "top_logprobs",
                        "tools",
                        "tool_choice",
                        "stream",
                        "stream_options",
                        "chat_template_kwargs",
                        "thinking_token_budget",
                        "reasoning_effort",
                        "seed",
                        "temperature",
                        "top_p",
                        "top_k",
                        "min_p",
                        "stop_token_ids",
                        "response_format",
                        "logit_bias",
                        "tessera_script",
                        "thinking",
                        "min_tokens",
                        "best_of",
                        "echo",
                        "suffix",
                        "add_special_tokens"})
    keys.push_back(k);
  int bodies = 0;
  for (const auto& key : keys) {
    for (const auto& v : odd_values()) {
      OJson b = base;
      b[key] = v;
      ++bodies;
      try {
        if (chat)
          parse_chat_request(b, demo(), lim);
        else
          parse_completion_request(b, demo(), lim);
      } catch (const ApiError& e) {
        EXPECT_GE(e.status(), 400);
        EXPECT_LT(e.status(), 500);
      } catch (const std::exception& e) {
        ADD_FAILURE() << key << " = " << v.dump() << ": " << e.what();
      }
    }
  }
  EXPECT_GT(bodies, 500);
}

TEST(RequestFuzz, ChatFieldsOfEveryType) {
  expect_only_api_errors(
      OJson::parse(
          R"({"model":"tessera-demo-dsv3-random-weights","messages":[{"role":"user","content":"hi"}],"max_tokens":4})"),
      true);
}

TEST(RequestFuzz, CompletionFieldsOfEveryType) {
  expect_only_api_errors(OJson::parse(R"({"prompt":"hi","max_tokens":4})"), false);
}

// logit_bias: token ids as keys, biases in [-100, 100] as values, into the sampling parameters; any
// other shape is a 400 naming logit_bias.
TEST(RequestParse, LogitBiasIsParsedOrRefusedByName) {
  ParseLimits lim;
  const auto job = parse_completion_request(
      OJson::parse(R"({"prompt":"hi","max_tokens":2,"logit_bias":{"5":10,"129279":-100,"42":0.5}})"), demo(), lim);
  std::vector<std::pair<int32_t, float>> want = {{5, 10.0f}, {129279, -100.0f}, {42, 0.5f}};
  auto got = job.params.logit_bias;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const char* bad : {R"([1,2])", R"({"abc":1})", R"({"-1":1})", R"({"129280":1})", R"({"7":101})", R"({"7":"1"})",
                          R"({"":1})", R"({"7x":1})", R"({"7":-100.5})"}) {
    try {
      parse_completion_request(OJson::parse(std::string(R"({"prompt":"hi","max_tokens":2,"logit_bias":)") + bad + "}"),
                               demo(), lim);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad;
      EXPECT_EQ(e.param(), "logit_bias") << bad;
    }
  }
}

TEST(RequestFuzz, MessageShapes) {
  ParseLimits lim;
  std::mt19937 rng(7);
  const auto vals = odd_values();
  for (int i = 0; i < 2000; ++i) {
    OJson msg = OJson::object();
    for (const char* k : {"role", "content", "tool_calls", "tool_call_id", "reasoning_content", "reasoning", "name"})
      if (rng() % 2) msg[k] = vals[rng() % vals.size()];
    if (rng() % 2) msg["role"] = std::vector<std::string>{"user", "assistant", "tool", "system"}[rng() % 4];
    OJson b = {{"messages", OJson::array({msg})}, {"max_tokens", 2}};
    try {
      parse_chat_request(b, demo(), lim);
    } catch (const ApiError& e) {
      EXPECT_LT(e.status(), 500);
    } catch (const std::exception& e) {
      ADD_FAILURE() << b.dump() << ": " << e.what();
    }
  }
}

// /v1/messages: every Anthropic field, then content blocks of random shapes in either role, through
// the translation and the chat parser: an ApiError 4xx or a job, nothing else.
TEST(RequestFuzz, AnthropicMessagesFieldsAndBlocks) {
  ParseLimits lim;
  lim.allow_test_script = true;
  auto parse = [&](const OJson& b) {
    try {
      parse_messages_request(b, demo(), lim);
    } catch (const ApiError& e) {
      EXPECT_GE(e.status(), 400) << b.dump();
      EXPECT_LT(e.status(), 500) << b.dump();
    } catch (const std::exception& e) {
      ADD_FAILURE() << b.dump() << ": " << e.what();
    }
  };
  const OJson base = OJson::parse(
      R"({"model":"tessera-demo-dsv3-random-weights","max_tokens":4,"messages":[{"role":"user","content":"hi"}],)"
      R"("tools":[{"name":"f","input_schema":{"type":"object"}}]})");
  const auto vals = odd_values();
  for (const char* k : {"model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k",
                        "stream", "tools", "tool_choice", "thinking", "metadata", "tessera_script"})
    for (const auto& v : vals) {
      OJson b = base;
      b[k] = v;
      parse(b);
    }
  std::mt19937 rng(11);
  const std::vector<std::string> types = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking", "image"};
  for (int i = 0; i < 2000; ++i) {
    OJson block = OJson::object();
    for (const char* k : {"type", "text", "id", "name", "input", "tool_use_id", "content", "is_error", "thinking"})
      if (rng() % 2) block[k] = vals[rng() % vals.size()];
    if (rng() % 4) block["type"] = types[rng() % types.size()];
    if (rng() % 2) block["tool_use_id"] = "t1";
    OJson b = base;
    b["messages"] = OJson::parse(
        R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}])");
    b["messages"].push_back(OJson{{"role", rng() % 2 ? "user" : "assistant"}, {"content", OJson::array({block})}});
    if (rng() % 2) b["messages"].push_back(OJson{{"role", "user"}, {"content", "next"}});
    if (rng() % 3 == 0) b["tool_choice"] = OJson{{"type", vals[rng() % vals.size()]}, {"name", "f"}};
    if (rng() % 3 == 0) b["thinking"] = OJson{{"type", "enabled"}, {"budget_tokens", vals[rng() % vals.size()]}};
    parse(b);
  }
}

// /v1/responses: every Responses field, then input items of random shapes, through the translation
// and the chat parser: an ApiError 4xx or a job, nothing else.
TEST(RequestFuzz, ResponsesFieldsAndItems) {
  ParseLimits lim;
  lim.allow_test_script = true;
  auto parse = [&](const OJson& b) {
    try {
      OJson echo;
      parse_responses_request(b, demo(), lim, echo);
    } catch (const ApiError& e) {
      EXPECT_GE(e.status(), 400) << b.dump();
      EXPECT_LT(e.status(), 500) << b.dump();
    } catch (const std::exception& e) {
      ADD_FAILURE() << b.dump() << ": " << e.what();
    }
  };
  const OJson base = OJson::parse(R"({"model":"tessera-demo-dsv3-random-weights","max_output_tokens":4,"input":"hi",)"
                                  R"("tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]})");
  const auto vals = odd_values();
  for (const char* k : {"model",
                        "input",
                        "instructions",
                        "tools",
                        "tool_choice",
                        "max_output_tokens",
                        "temperature",
                        "top_p",
                        "stream",
                        "stream_options",
                        "reasoning",
                        "text",
                        "parallel_tool_calls",
                        "metadata",
                        "user",
                        "store",
                        "previous_response_id",
                        "include",
                        "truncation",
                        "background",
                        "service_tier",
                        "tessera_script",
                        "unknown"})
    for (const auto& v : vals) {
      OJson b = base;
      b[k] = v;
      parse(b);
      if (v.is_object() || v.is_string()) {  // nested: reasoning.effort, text.format, tool_choice.type
        for (const char* nested : {"reasoning", "text", "tool_choice"}) {
          OJson n = base;
          n[nested] = OJson{{"effort", v}, {"format", v}, {"type", v}, {"name", v}};
          parse(n);
        }
      }
    }
  std::mt19937 rng(13);
  const std::vector<std::string> types = {"message",   "function_call",  "function_call_output",
                                          "reasoning", "item_reference", "input_text"};
  for (int i = 0; i < 2000; ++i) {
    OJson item = OJson::object();
    for (const char* k : {"type", "role", "content", "call_id", "name", "arguments", "output", "id", "summary"})
      if (rng() % 2) item[k] = vals[rng() % vals.size()];
    if (rng() % 4) item["type"] = types[rng() % types.size()];
    if (rng() % 2) item["call_id"] = "c1";
    if (rng() % 3 == 0)
      item["content"] = OJson::array(
          {OJson{{"type", rng() % 2 ? "input_text" : "reasoning_text"}, {"text", vals[rng() % vals.size()]}}});
    OJson b = base;
    b["input"] = OJson::parse(
        R"([{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}])");
    b["input"].push_back(item);
    if (rng() % 2) b["input"].push_back(OJson{{"role", "user"}, {"content", "next"}});
    parse(b);
  }
}

}  // namespace
}  // namespace tessera::server
