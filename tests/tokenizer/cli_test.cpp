// `tessera tokenize --jsonl` against a golden file, and `tessera detokenize`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "support/test_support.h"

namespace tessera::test {
namespace {

TEST(TokenizerCli, JsonlMatchesGolden) {
  const auto dir = fixtures_dir() / "tokenizers";
  const auto golden = dir / "kimi-style-tiktoken.golden.jsonl";
  std::string out;
  const int rc = run_command(tessera_binary().string() + " tokenize --model '" +
                                 (dir / "kimi-style-tiktoken").string() + "' --jsonl '" + golden.string() + "'",
                             &out);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream got(out), want(read_file(golden));
  std::string gl, wl;
  int lines = 0;
  while (std::getline(want, wl)) {
    if (wl.empty()) continue;
    ASSERT_TRUE(std::getline(got, gl)) << "missing output for golden line " << lines + 1;
    EXPECT_EQ(nlohmann::json::parse(gl).at("ids"), nlohmann::json::parse(wl).at("ids")) << "line " << lines + 1;
    ++lines;
  }
  EXPECT_GT(lines, 300);
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
  const auto model = (fixtures_dir() / "tokenizers" / "deepseek-v3").string();
  std::string out;
  // Golden line 7 of deepseek-v3.golden.jsonl: "Hello world" -> 19923 2058.
  ASSERT_EQ(run_command(tessera_binary().string() + " tokenize --model '" + model + "' --text 'Hello world'", &out), 0);
  EXPECT_EQ(out, "19923 2058\n");
  ASSERT_EQ(
      run_command(tessera_binary().string() + " tokenize --json --model '" + model + "' --text 'Hello world'", &out),
      0);
  EXPECT_EQ(out, "[19923, 2058]\n");
  ASSERT_EQ(run_command(tessera_binary().string() + " detokenize --model '" + model + "' --ids 19923,2058", &out), 0);
  EXPECT_EQ(out, "Hello world\n");
  EXPECT_NE(run_command(tessera_binary().string() + " detokenize --model '" + model + "' --ids 19923,99999999", &out),
            0);
  EXPECT_NE(out.find("99999999"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::test
