// Chat-template lookup from a model directory and the render inputs HF passes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "support/test_support.h"
#include "text/template/chat_template.h"

namespace tessera::text {
namespace {

using J = nlohmann::ordered_json;

TEST(ChatTemplateLookup, JinjaFileWinsOverTokenizerConfig) {
  auto dir = test::make_temp_dir("tpl-lookup");
  test::write_file(dir / "chat_template.jinja", "FILE");
  test::write_file(dir / "tokenizer_config.json", R"({"chat_template": "CONFIG"})");
  EXPECT_EQ(find_chat_template(dir, false).source, "FILE");
  std::filesystem::remove(dir / "chat_template.jinja");
  EXPECT_EQ(find_chat_template(dir, false).source, "CONFIG");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateLookup, NamedListPicksToolUseOnlyWithTools) {
  auto dir = test::make_temp_dir("tpl-lookup");
  test::write_file(
      dir / "tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(find_chat_template(dir, false).source, "D");
  EXPECT_EQ(find_chat_template(dir, true).source, "T");
  test::write_file(dir / "tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "D"}]})");
  EXPECT_EQ(find_chat_template(dir, true).source, "D");
  test::write_file(dir / "tokenizer_config.json", R"({"eos_token": "x"})");
  EXPECT_THROW(find_chat_template(dir, false), core::Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateLookup, KimiTokenizerDetection) {
  auto dir = test::make_temp_dir("tpl-kimi");
  test::write_file(dir / "tokenizer_config.json", R"({"tokenizer_class": "TikTokenTokenizer", "chat_template": "x"})");
  EXPECT_TRUE(find_chat_template(dir, false).sort_tool_keys);
  test::write_file(dir / "tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizerFast", "chat_template": "x"})");
  EXPECT_FALSE(find_chat_template(dir, false).sort_tool_keys);
  std::filesystem::remove_all(dir);
  // The fixture's Kimi-style tokenizer directory.
  EXPECT_TRUE(model_sorts_tool_keys(test::fixtures_dir() / "tokenizers" / "kimi-style-tiktoken"));
  EXPECT_FALSE(model_sorts_tool_keys(test::fixtures_dir() / "tokenizers" / "deepseek-v3"));
}

TEST(ChatTemplateLookup, DeepSeekTokenizerConfigTemplateRenders) {
  const auto src = find_chat_template(test::fixtures_dir() / "tokenizers" / "deepseek-v3", false);
  ChatTemplate t(src.source);
  ChatRenderInput in;
  in.messages = J::parse(R"([{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}])");
  in.bos_token = "<｜begin▁of▁sentence｜>";
  // frontend.md §3.4: the DeepSeek-V3 golden render of system + user.
  EXPECT_EQ(t.render(in), "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>");
}

TEST(ChatTemplateRender, VariablesAndToolSorting) {
  ChatTemplateOptions opts;
  opts.sort_tool_keys = true;
  ChatTemplate t("{{ tools|tojson }}|{{ add_generation_prompt }}|{{ thinking }}|{{ documents }}|{{ bos_token }}", opts);
  ChatRenderInput in;
  in.tools = J::parse(R"([{"type": "function", "function": {"name": "f", "description": "d"}}])");
  in.kwargs = {{"thinking", false}};
  in.bos_token = "<s>";
  EXPECT_EQ(t.render(in),
            R"([{"function": {"description": "d", "name": "f"}, "type": "function"}]|True|False|None|<s>)");
  ChatTemplate unsorted("{{ tools|tojson }}");
  EXPECT_EQ(unsorted.render(in), R"([{"type": "function", "function": {"name": "f", "description": "d"}}])");
  in.kwargs = {{"messages", 1}};
  EXPECT_THROW(t.render(in), TemplateError);
}

// A tokenizer without BOS/EOS (Qwen's "bos_token": null): transformers leaves the token out of
// special_tokens_map, so jinja2 sees an Undefined -- it prints as nothing, is falsy and not
// `defined`, and `+` on it raises. None would print "None" instead.
TEST(ChatTemplateRender, UnsetSpecialTokensAreUndefined) {
  ChatTemplate t(
      "{% if bos_token %}{{ bos_token }}{% endif %}A|{{ bos_token }}|{{ eos_token }}|"
      "{{ bos_token is defined }}|{{ eos_token is none }}");
  ChatRenderInput in;
  EXPECT_EQ(t.render(in), "A|||False|False");
  in.bos_token = "<s>";
  EXPECT_EQ(t.render(in), "<s>A|<s>||True|False");
  in.bos_token.reset();
  in.eos_token = "";  // an empty token is still a defined (falsy) string
  EXPECT_EQ(t.render(in), "A|||False|False");
  EXPECT_THROW(ChatTemplate("{{ bos_token + 'x' }}").render(ChatRenderInput{}), TemplateError);
  // chat_template_kwargs may pass None explicitly (as HF's **kwargs would): then it is None.
  in.kwargs = {{"bos_token", nullptr}};
  EXPECT_EQ(ChatTemplate("{{ bos_token }}|{{ bos_token is none }}").render(in), "None|True");
}

TEST(ChatTemplateRender, DeeplyNestedMessagesFailCleanly) {
  ChatTemplate t("{{ messages }}");
  ChatRenderInput in;
  in.messages = J::parse("[" + std::string(20000, '[') + std::string(20000, ']') + "]");
  EXPECT_THROW(t.render(in), TemplateError);
  ChatTemplateOptions sorted;
  sorted.sort_tool_keys = true;
  in.messages = J::array();
  in.tools = J::parse(std::string(20000, '[') + std::string(20000, ']'));
  EXPECT_THROW(ChatTemplate("{{ tools }}", sorted).render(in), TemplateError);
}

TEST(ChatTemplateRender, DeepSortKeys) {
  EXPECT_EQ(deep_sort_keys(J::parse(R"({"b": [{"d": 1, "c": 2}], "a": {"z": 0, "é": 1, "Z": 2}})")).dump(),
            R"({"a":{"Z":2,"z":0,"é":1},"b":[{"c":2,"d":1}]})");
}

}  // namespace
}  // namespace tessera::text

namespace tessera::text {
namespace {

// `tessera render-chat --jsonl` over the goldens: the CLI path (file lookup, auto tool sorting for
// Kimi templates, error lines) must agree with the fixtures too.
TEST(RenderChatCli, JsonlMatchesGoldens) {
  if (!std::filesystem::exists(test::tessera_binary())) GTEST_SKIP() << "tessera binary not built";
  const auto dir = test::fixtures_dir() / "chat_templates";
  std::string out;
  const int rc =
      test::run_command(test::tessera_binary().string() + " render-chat --jsonl '" + (dir / "goldens.jsonl").string() +
                            "' --template-dir '" + dir.string() + "' 2>/dev/null",
                        &out);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream got(out);
  std::ifstream want(dir / "goldens.jsonl");
  std::string gl, wl;
  int n = 0;
  while (std::getline(want, wl)) {
    ASSERT_TRUE(std::getline(got, gl)) << "missing output line " << n;
    const auto w = J::parse(wl), g = J::parse(gl);
    if (w.contains("error")) {
      EXPECT_TRUE(g.contains("error")) << "line " << n << ": " << gl;
    } else {
      EXPECT_EQ(g.value("output", std::string("<missing>")), w["output"].get<std::string>()) << "line " << n;
    }
    ++n;
  }
  EXPECT_EQ(n, 168);
}

TEST(RenderChatCli, RequestWithModelDirectory) {
  if (!std::filesystem::exists(test::tessera_binary())) GTEST_SKIP() << "tessera binary not built";
  auto dir = test::make_temp_dir("render-chat");
  test::write_file(
      dir / "req.json",
      R"({"messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}]})");
  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " render-chat --json --model '" +
                                       (test::fixtures_dir() / "tokenizers" / "deepseek-v3").string() +
                                       "' --request '" + (dir / "req.json").string() + "' 2>/dev/null",
                                   &out);
  ASSERT_EQ(rc, 0) << out;
  const auto j = J::parse(out);
  EXPECT_EQ(j["prompt"], "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>");
  std::filesystem::remove_all(dir);
}

// A jsonl record with "bos_token": null / "eos_token": null renders with no such token (the whole
// command used to stop with nlohmann's "type must be string, but is null"); absent fields fall back
// to --bos-token / --eos-token; any other type stops the command naming the line and field.
TEST(RenderChatCli, JsonlNullSpecialTokens) {
  if (!std::filesystem::exists(test::tessera_binary())) GTEST_SKIP() << "tessera binary not built";
  auto dir = test::make_temp_dir("render-chat-null");
  test::write_file(dir / "t.jinja",
                   "{% if bos_token %}{{ bos_token }}{% endif %}{{ messages[0]['content'] }}{{ eos_token }}"
                   "{% if eos_token is defined %}+{% endif %}");
  const std::string msg = R"("messages": [{"role": "user", "content": "Hi"}])";
  test::write_file(dir / "r.jsonl", "{" + msg + R"(, "bos_token": null, "eos_token": null})" + "\n" +         //
                                        "{" + msg + R"(, "bos_token": "<s>", "eos_token": "</s>"})" + "\n" +  //
                                        "{" + msg + R"(, "eos_token": null})" + "\n");
  const std::string cmd = test::tessera_binary().string() + " render-chat --template '" + (dir / "t.jinja").string() +
                          "' --bos-token '<B>' --jsonl ";
  std::string out;
  ASSERT_EQ(test::run_command(cmd + "'" + (dir / "r.jsonl").string() + "' 2>&1", &out), 0) << out;
  std::istringstream lines(out);
  std::string line;
  std::vector<std::string> got;
  while (std::getline(lines, line)) got.push_back(J::parse(line).value("output", "<error: " + line + ">"));
  EXPECT_EQ(got, (std::vector<std::string>{"Hi", "<s>Hi</s>+", "<B>Hi"}));

  test::write_file(dir / "bad.jsonl", "{" + msg + "}\n{" + msg + R"(, "bos_token": 5})" + "\n");
  EXPECT_NE(test::run_command(cmd + "'" + (dir / "bad.jsonl").string() + "' 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("line 2"), std::string::npos) << out;
  EXPECT_NE(out.find("'bos_token'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// --model with a Qwen-style tokenizer_config.json ("bos_token": null): the template sees no BOS and
// the model's tokenizer still loads (the token count is a number, not null).
TEST(RenderChatCli, ModelWithNullBosToken) {
  if (!std::filesystem::exists(test::tessera_binary())) GTEST_SKIP() << "tessera binary not built";
  auto dir = test::make_temp_dir("render-chat-qwen");
  std::filesystem::copy_file(test::fixtures_dir() / "tokenizers" / "o200k" / "tokenizer.json", dir / "tokenizer.json");
  J cfg = {{"bos_token", nullptr},
           {"eos_token", "<|endoftext|>"},
           {"chat_template",
            "{% if bos_token %}{{ bos_token }}{% endif %}{% if bos_token is defined %}[bos]{% endif %}"
            "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}{% endfor %}"}};
  test::write_file(dir / "tokenizer_config.json", cfg.dump());
  test::write_file(dir / "req.json", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " render-chat --json --model '" + dir.string() +
                                       "' --request '" + (dir / "req.json").string() + "' 2>&1",
                                   &out);
  ASSERT_EQ(rc, 0) << out;
  const auto j = J::parse(out);
  EXPECT_EQ(j["prompt"], "<user>Hi<|endoftext|>");
  EXPECT_TRUE(j["tokens"].is_number_integer()) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::text
