// Every record of shared/fixtures/chat_templates/goldens.jsonl (rendered by Python jinja2 in HF's
// environment) must render to exactly its `output`, or fail where the record has an `error`.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "support/test_support.h"
#include "text/template/chat_template.h"

namespace tessera::text {
namespace {

std::string escape_for_log(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out.push_back(c);
  }
  return out;
}

// "first difference at byte N" plus context from both sides, so a failure is diagnosable.
std::string describe_mismatch(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const size_t from = k > 40 ? k - 40 : 0;
  std::ostringstream ss;
  ss << "first difference at byte " << k << " (got " << got.size() << " bytes, want " << want.size() << ")\n"
     << "  got:  ..." << escape_for_log(got.substr(from, 100)) << "\n"
     << "  want: ..." << escape_for_log(want.substr(from, 100));
  return ss.str();
}

TEST(ChatTemplateGoldens, AllRecordsMatch) {
  const auto dir = test::fixtures_dir() / "chat_templates";
  std::ifstream f(dir / "goldens.jsonl");
  ASSERT_TRUE(f) << "missing " << (dir / "goldens.jsonl");
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::string line;
  int total = 0, passed = 0, outputs = 0, errors = 0;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    ++total;
    const auto rec = nlohmann::ordered_json::parse(line);
    const std::string name = rec["template"].get<std::string>();
    auto& tpl = templates[name];
    if (!tpl) {
      const std::string source = test::read_file(dir / name);
      ChatTemplateOptions opts;
      // The fixtures' Kimi templates were rendered with deep-sorted tools, as Kimi's tokenizer does.
      opts.sort_tool_keys = name.rfind("kimi", 0) == 0;
      EXPECT_EQ(opts.sort_tool_keys, template_looks_like_kimi(source)) << name;
      tpl = std::make_unique<ChatTemplate>(source, opts);
    }
    ChatRenderInput in;
    in.messages = rec["messages"];
    in.tools = rec["tools"];
    in.add_generation_prompt = rec["add_generation_prompt"].get<bool>();
    in.bos_token = rec["bos_token"].get<std::string>();
    in.eos_token = rec["eos_token"].get<std::string>();
    in.kwargs = rec["kwargs"];
    const std::string label = name + " / " + rec["case"].get<std::string>() +
                              " / add_generation_prompt=" + (in.add_generation_prompt ? "true" : "false") +
                              " / kwargs=" + rec["kwargs"].dump();
    if (rec.contains("error")) {
      ++errors;
      try {
        const std::string out = tpl->render(in);
        ADD_FAILURE() << label << ": expected an error (" << rec["error"].get<std::string>() << "), rendered:\n"
                      << escape_for_log(out);
      } catch (const TemplateError&) {
        ++passed;
      }
      continue;
    }
    ++outputs;
    const std::string want = rec["output"].get<std::string>();
    try {
      const std::string got = tpl->render(in);
      if (got == want) {
        ++passed;
      } else {
        ADD_FAILURE() << label << ": " << describe_mismatch(got, want);
      }
    } catch (const TemplateError& e) {
      ADD_FAILURE() << label << ": unexpected error: " << e.what();
    }
  }
  std::printf("chat template goldens: %d/%d passed (%d outputs, %d expected errors)\n", passed, total, outputs, errors);
  EXPECT_EQ(total, 168);
  EXPECT_EQ(passed, total);
}

}  // namespace
}  // namespace tessera::text
