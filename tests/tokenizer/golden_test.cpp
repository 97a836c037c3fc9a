// Every line of the reference goldens (HF tokenizers / tiktoken outputs) must encode to exactly
// the golden ids and decode back to the original text.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "tokenizer_fixture.h"

namespace tessera::test {
namespace {

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(' ');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

void check_golden(const std::string& name) {
  const text::Tokenizer& tok = fixture_tokenizer(name);
  const auto path = fixtures_dir() / "tokenizers" / (name + ".golden.jsonl");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::string line;
  int checked = 0, line_no = 0, encode_mismatch = 0, decode_mismatch = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text");
    const std::vector<int32_t> want = j.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text);
    if (got != want) {
      if (encode_mismatch++ == 0)
        ADD_FAILURE() << name << " line " << line_no << ": encode mismatch for text " << nlohmann::json(text).dump()
                      << "\n  want: " << ids_str(want) << "\n  got:  " << ids_str(got);
    }
    const std::string decoded = tok.decode(want);
    const std::string want_decoded = j.contains("decoded") ? j["decoded"].get<std::string>() : text;
    if (decoded != want_decoded) {
      if (decode_mismatch++ == 0)
        ADD_FAILURE() << name << " line " << line_no
                      << ": decode mismatch\n  want: " << nlohmann::json(want_decoded).dump()
                      << "\n  got:  " << nlohmann::json(decoded).dump();
    }
    ++checked;
  }
  EXPECT_EQ(encode_mismatch, 0) << name << ": lines whose ids differ";
  EXPECT_EQ(decode_mismatch, 0) << name << ": lines whose decode differs";
  EXPECT_GT(checked, 300) << name << ": golden file unexpectedly short";
  std::printf("[ golden ] %s: %d lines checked, %d encode mismatches, %d decode mismatches\n", name.c_str(), checked,
              encode_mismatch, decode_mismatch);
}

TEST(TokenizerGolden, DeepSeekV3) { check_golden("deepseek-v3"); }
TEST(TokenizerGolden, O200k) { check_golden("o200k"); }
TEST(TokenizerGolden, KimiStyleTiktoken) { check_golden("kimi-style-tiktoken"); }

}  // namespace
}  // namespace tessera::test
