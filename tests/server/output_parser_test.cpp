// Token-level reasoning and tool-call parsing through OutputParser, with real tokenizers: the
// Kimi-style tiktoken fixture (<think>, Kimi tool markers) and DeepSeek-V3's tokenizer.json.
#include <gtest/gtest.h>

#include <map>

#include "support/test_support.h"
#include "text/reasoning/output_parser.h"
#include "text/template/chat_template.h"

namespace tessera::text {
namespace {

const Tokenizer& kimi() {
  static auto t = load_tokenizer(test::fixtures_dir() / "tokenizers" / "kimi-style-tiktoken");
  return *t;
}
const Tokenizer& deepseek() {
  static auto t = load_tokenizer(test::fixtures_dir() / "tokenizers" / "deepseek-v3");
  return *t;
}

struct Result {
  std::string content, reasoning;
  std::map<int64_t, ToolCall> calls;  // from the deltas
  int64_t deltas_with_args = 0;
  OutputParser* parser = nullptr;
};

// Feeds `text` (encoded with special tokens) one token at a time and accumulates the deltas.
Result run(OutputParser& p, const Tokenizer& tok, const std::string& text, bool finish = true) {
  Result r;
  r.parser = &p;
  auto take = [&](const OutputDelta& d) {
    r.content += d.content;
    r.reasoning += d.reasoning;
    for (const auto& t : d.tool_calls) {
      auto& c = r.calls[t.index];
      if (t.id) c.id = *t.id;
      if (t.name) c.name = *t.name;
      c.arguments += t.arguments;
      if (!t.arguments.empty()) ++r.deltas_with_args;
    }
  };
  for (int32_t id : tok.encode(text)) take(p.add(id));
  if (finish) take(p.finish());
  return r;
}

OutputParserOptions kimi_opts(ReasoningState start, bool tools = true) {
  OutputParserOptions o;
  o.reasoning = find_reasoning_markers(kimi());
  o.start = start;
  if (tools) o.tools = find_tool_call_markers(kimi());
  return o;
}

TEST(ReasoningState, StartsFromThePromptTail) {
  const auto m = find_reasoning_markers(kimi());
  ASSERT_TRUE(m.valid());
  auto ids = [](const std::string& s) { return kimi().encode(s); };
  EXPECT_EQ(initial_reasoning_state(ids("<|im_middle|><think>"), m, true), ReasoningState::kReasoning);
  EXPECT_EQ(initial_reasoning_state(ids("<|im_middle|><think>"), m, false), ReasoningState::kReasoning);
  EXPECT_EQ(initial_reasoning_state(ids("<think></think>"), m, true), ReasoningState::kExpectThink);
  EXPECT_EQ(initial_reasoning_state(ids("<think>a</think> b"), m, false), ReasoningState::kContent);
  // An earlier turn's closed reasoning does not count as open.
  EXPECT_EQ(initial_reasoning_state(ids("<think>old</think>answer<|im_end|>user"), m, true),
            ReasoningState::kExpectThink);
}

// Kimi-K2.5 puts <think> (thinking on) or <think></think> (off) at the end of the prompt; a
// history turn's closed reasoning must not matter.
TEST(ReasoningState, KimiK25PromptTail) {
  const ChatTemplate tpl(test::read_file(test::fixtures_dir() / "chat_templates" / "kimi-k25-reconstructed.jinja"));
  ChatRenderInput in;
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"a"},{"role":"assistant","reasoning_content":"r","content":"b"},{"role":"user","content":"c"}])");
  const auto m = find_reasoning_markers(kimi());
  in.kwargs = {{"thinking", true}};
  EXPECT_EQ(initial_reasoning_state(kimi().encode(tpl.render(in)), m, true), ReasoningState::kReasoning);
  in.kwargs = {{"thinking", false}};
  EXPECT_EQ(initial_reasoning_state(kimi().encode(tpl.render(in)), m, false), ReasoningState::kContent);
}

TEST(OutputParser, ReasoningThenContent) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kReasoning));
  Result r = run(p, kimi(), "I should add.</think>The sum is 4.");
  EXPECT_EQ(r.reasoning, "I should add.");
  EXPECT_EQ(r.content, "The sum is 4.");
  EXPECT_EQ(p.reasoning_tokens(), static_cast<int64_t>(kimi().encode("I should add.").size()) + 1);
}

TEST(OutputParser, ModelOpensThink) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kExpectThink));
  Result r = run(p, kimi(), "<think>hmm</think>ok");
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "ok");
  OutputParser q(kimi(), kimi_opts(ReasoningState::kExpectThink));
  Result s = run(q, kimi(), "plain answer");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "plain answer");
}

TEST(OutputParser, ReasoningCutByLengthStaysReasoning) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kReasoning));
  Result r = run(p, kimi(), "still thinking about");
  EXPECT_EQ(r.reasoning, "still thinking about");
  EXPECT_EQ(r.content, "");
}

TEST(OutputParser, KimiToolCalls) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kReasoning));
  Result r =
      run(p, kimi(),
          "need weather</think>Let me check. <|tool_calls_section_begin|> <|tool_call_begin|> functions.get_weather:0 "
          "<|tool_call_argument_begin|> {\"city\": \"Beijing\"} <|tool_call_end|><|tool_call_begin|>get_news:1"
          "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>");
  EXPECT_EQ(r.reasoning, "need weather");
  EXPECT_EQ(r.content, "Let me check. ");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Beijing\"}");
  EXPECT_EQ(r.calls[1].id, "get_news:1");
  EXPECT_EQ(r.calls[1].name, "get_news");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_GT(r.deltas_with_args, 2);  // streamed incrementally, not in one piece
  // The parser's own record equals what the deltas add up to.
  ASSERT_EQ(p.tool_calls().size(), 2u);
  EXPECT_EQ(p.tool_calls()[0].arguments, r.calls[0].arguments);
  EXPECT_EQ(p.tool_calls()[1].id, r.calls[1].id);
}

TEST(OutputParser, KimiToolSectionEndsReasoningImplicitly) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kReasoning));
  Result r = run(p, kimi(),
                 "thinking<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"
                 "\"a\":1}<|tool_call_end|><|tool_calls_section_end|>");
  EXPECT_EQ(r.reasoning, "thinking");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":1}");
}

TEST(OutputParser, BareIdGetsKimiStyleId) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kContent));
  Result r = run(p, kimi(), "<|tool_call_begin|>lookup<|tool_call_argument_begin|>{\"q\": 1}<|tool_call_end|>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "lookup");
  EXPECT_EQ(r.calls[0].id, "functions.lookup:0");
}

TEST(OutputParser, MangledKimiIdsFindTheirTool) {
  auto o = kimi_opts(ReasoningState::kContent);
  o.tool_names = {"exec", "read_file"};
  OutputParser p(kimi(), o);
  Result r =
      run(p, kimi(),
          "<|tool_calls_section_begin|><|tool_call_begin|>functionsexec5<|tool_call_argument_begin|>{}<|tool_call_end|>"
          "<|tool_call_begin|>functions.read_file:6<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_"
          "end|>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "exec");
  EXPECT_EQ(r.calls[0].id, "functionsexec5");  // ids stay verbatim: the model refers to them later
  EXPECT_EQ(r.calls[1].name, "read_file");
  EXPECT_EQ(r.calls[1].id, "functions.read_file:6");
}

TEST(OutputParser, CutToolCallIsDroppedCompleteOnesKept) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kContent));
  run(p, kimi(),
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": "
      "1}<|tool_call_end|>"
      "<|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{\"y\": ");
  EXPECT_TRUE(p.tool_call_cut());
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].name, "a");
}

TEST(OutputParser, ToolMarkersAreTextWithoutToolParsing) {
  OutputParser p(kimi(), kimi_opts(ReasoningState::kContent, /*tools=*/false));
  Result r = run(p, kimi(), "a<|tool_call_begin|>b");
  EXPECT_TRUE(r.calls.empty());
  // Kimi's tool markers are not special tokens: without tool parsing they stay visible text.
  EXPECT_EQ(r.content, "a<|tool_call_begin|>b");
}

TEST(OutputParser, StopStringsApplyToContentOnly) {
  auto o = kimi_opts(ReasoningState::kReasoning);
  o.stop_strings = {"", "NEVER", "STOP"};  // empty strings are ignored, and do not shift which matched
  OutputParser p(kimi(), o);
  Result r = run(p, kimi(), "no STOP here</think>answer STOP ignored");
  EXPECT_EQ(r.reasoning, "no STOP here");
  EXPECT_EQ(r.content, "answer ");
  EXPECT_TRUE(p.stopped());
  EXPECT_EQ(p.stop_string(), "STOP");
}

TEST(OutputParser, HeldTextStaysInItsSegment) {
  // "ab" could start the stop string "abc": held back at the end of the reasoning, it must be
  // released into the reasoning, not into the answer.
  auto o = kimi_opts(ReasoningState::kReasoning);
  o.stop_strings = {"abc"};
  OutputParser p(kimi(), o);
  Result r = run(p, kimi(), "xab</think>c");
  EXPECT_EQ(r.reasoning, "xab");
  EXPECT_EQ(r.content, "c");
  EXPECT_FALSE(p.stopped());
  EXPECT_EQ(p.stop_string(), "");
}

TEST(OutputParser, DeepSeekToolCalls) {
  OutputParserOptions o;
  o.tools = find_tool_call_markers(deepseek());
  ASSERT_EQ(o.tools.format, ToolCallFormat::kDeepSeekV3);
  OutputParser p(deepseek(), o);
  Result r =
      run(p, deepseek(),
          "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
          "\"Beijing\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
          "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Beijing\"}");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_FALSE(r.calls[0].id.empty());
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  ASSERT_EQ(p.tool_calls().size(), 2u);
  EXPECT_EQ(p.tool_calls()[0].arguments, r.calls[0].arguments);
}

TEST(OutputParser, DeepSeekV31Form) {
  OutputParserOptions o;
  o.tools = find_tool_call_markers(deepseek());
  OutputParser p(deepseek(), o);
  Result r = run(p, deepseek(),
                 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": "
                 "\"x\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "search");
  EXPECT_EQ(r.calls[0].arguments, "{\"q\": \"x\"}");
}

}  // namespace
}  // namespace tessera::text
