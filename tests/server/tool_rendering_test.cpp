// Chat templates that ignore tools: DeepSeek-V3's official template (the fixture) is probed as
// ignoring `tools` and dropping the calls of assistant turns with text, and the server's rewrite
// makes the prompt carry both, in the model's own syntax. Kimi's template renders tools itself and
// is left alone.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "core/file.h"
#include "server/request_parse.h"
#include "server/served_model.h"
#include "server/tool_rendering.h"
#include "support/test_support.h"

namespace tessera::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string fixture_template(const std::string& name) {
  return core::read_file(test::fixtures_dir() / "chat_templates" / name);
}

text::ChatRenderInput deepseek_specials() {
  text::ChatRenderInput in;
  in.bos_token = "<｜begin▁of▁sentence｜>";
  in.eos_token = "<｜end▁of▁sentence｜>";
  return in;
}

const OJson kWeatherTool = OJson::parse(R"({"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");

TEST(ToolRendering, DeepSeekV3TemplateIsProbedAsIgnoringToolsAndCallsWithText) {
  const text::ChatTemplate t(fixture_template("deepseek-v3.jinja"));
  const ToolRendering r = probe_tool_rendering(t, deepseek_specials(), text::ToolCallFormat::kDeepSeekV3);
  EXPECT_FALSE(r.declares_tools);
  EXPECT_FALSE(r.keeps_calls_with_text);
  EXPECT_TRUE(r.rewrite);
  EXPECT_NE(r.describe().find("ignores `tools`"), std::string::npos) << r.describe();
  // The same gaps with a syntax tessera cannot write: no rewrite, and the message says what to do.
  const ToolRendering none = probe_tool_rendering(t, deepseek_specials(), text::ToolCallFormat::kNone);
  EXPECT_FALSE(none.rewrite);
  EXPECT_NE(none.describe().find("--chat-template"), std::string::npos) << none.describe();
}

TEST(ToolRendering, KimiTemplateRendersToolsItself) {
  const text::ChatTemplate t(fixture_template("kimi-k2-thinking.jinja"));
  text::ChatRenderInput specials;
  specials.bos_token = "[BOS]";
  specials.eos_token = "[EOS]";
  const ToolRendering r = probe_tool_rendering(t, specials, text::ToolCallFormat::kKimiK2);
  EXPECT_TRUE(r.declares_tools);
  EXPECT_FALSE(r.rewrite);
}

TEST(ToolRendering, RewrittenDeepSeekConversationCarriesDeclarationsAndCalls) {
  const text::ChatTemplate t(fixture_template("deepseek-v3.jinja"));
  const ToolRendering r = probe_tool_rendering(t, deepseek_specials(), text::ToolCallFormat::kDeepSeekV3);
  text::ChatRenderInput in = deepseek_specials();
  in.tools = OJson::array({kWeatherTool});
  in.messages = OJson::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  const std::string before = t.render(in);
  EXPECT_EQ(before.find("get_weather"), std::string::npos) << "the fixture template was expected to drop tools";
  rewrite_for_template(r, in);
  const std::string out = t.render(in);
  // The declarations follow the conversation's own system prompt (DeepSeek joins system messages
  // with a blank line), parameters as json.dumps prints them.
  EXPECT_NE(out.find("<｜begin▁of▁sentence｜>Be brief.\n\n## Tools\nYou have access to the following tools:\n\n"
                     "### get_weather\nDescription: Weather of a city\n\nParameters: {\"type\": \"object\", "
                     "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}\n"),
            std::string::npos)
      << out;
  // The assistant turn keeps its text and its call, closed as the model closes it.
  EXPECT_NE(out.find("<｜Assistant｜>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                     "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
                     "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny"),
            std::string::npos)
      << out;
}

TEST(ToolRendering, ConversationWithoutToolsRendersAsTheTemplateDoes) {
  const text::ChatTemplate t(fixture_template("deepseek-v3.jinja"));
  const ToolRendering r = probe_tool_rendering(t, deepseek_specials(), text::ToolCallFormat::kDeepSeekV3);
  text::ChatRenderInput in = deepseek_specials();
  in.messages = OJson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}])");
  const std::string before = t.render(in);
  rewrite_for_template(r, in);
  EXPECT_EQ(t.render(in), before);
  EXPECT_EQ(
      before,
      "<｜begin▁of▁sentence｜>S<｜User｜>hi<｜Assistant｜>hello<｜end▁of▁sentence｜><｜User｜>bye<｜Assistant｜>");
}

// Through the server's request parsing: with the official template, tools now change the prompt.
TEST(ToolRendering, ToolsReachThePromptOfADeepSeekModel) {
  const auto dir = test::make_temp_dir("tool-rendering");
  std::filesystem::copy_file(test::fixtures_dir() / "tokenizers" / "deepseek-v3" / "tokenizer.json",
                             dir / "tokenizer.json");
  const OJson cfg = {{"bos_token", "<｜begin▁of▁sentence｜>"},
                     {"eos_token", "<｜end▁of▁sentence｜>"},
                     {"chat_template", fixture_template("deepseek-v3.jinja")}};
  test::write_file(dir / "tokenizer_config.json", cfg.dump());
  ServedModelOptions o;
  o.model_dir = dir;
  o.vocab_size = 129280;
  o.max_model_len = 4096;
  const ServedModel m = load_served_model(o);
  EXPECT_TRUE(m.tool_rendering.rewrite);
  OJson body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}};
  const size_t plain = parse_chat_request(body, m, ParseLimits{}).prompts.at(0).size();
  body["tools"] = OJson::array({kWeatherTool});
  const GenerationJob with = parse_chat_request(body, m, ParseLimits{});
  EXPECT_GT(with.prompts.at(0).size(), plain + 50);
  EXPECT_NE(m.tokenizer->decode(with.prompts.at(0)).find("### get_weather"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::server
