// Malformed tokenizer files give core::Error messages that name the file (and field / line).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/test_support.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::test {
namespace {

// A minimal valid byte-level BPE tokenizer.json: the 256 bytes, then "ab" = 256 from merge "a b".
nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[text::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["Ã©"] = 257;  // "é" in the byte-level alphabet (C3 A9)
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", {"Ã", "©"}}}}}};
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    text::load_tokenizer(dir);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "(no error)";
}

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("tok-load"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write_json(const nlohmann::json& j) { write_file(dir_ / "tokenizer.json", j.dump()); }
  std::filesystem::path dir_;
};

TEST_F(LoadErrors, TinyTokenizerLoads) {
  write_json(tiny_tokenizer_json());
  const auto tok = text::load_tokenizer(dir_);
  EXPECT_EQ(tok->encode("ab é"), (std::vector<int32_t>{256, 32, 257}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{256, 32, 257}), "ab é");
}

TEST_F(LoadErrors, MissingDirectoryAndFiles) {
  EXPECT_NE(load_error(dir_ / "nope").find("tok-load"), std::string::npos);
  EXPECT_NE(load_error(dir_).find("no tokenizer found"), std::string::npos);
}

TEST_F(LoadErrors, BadJson) {
  write_file(dir_ / "tokenizer.json", "{\"model\": ");
  const std::string e = load_error(dir_);
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
}

TEST_F(LoadErrors, UnknownPreTokenizer) {
  auto j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}}}};
  write_json(j);
  const std::string e = load_error(dir_);
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("pretokenizers[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("'Whitespace'"), std::string::npos) << e;
}

TEST_F(LoadErrors, BadMerge) {
  auto j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("x y z");
  write_json(j);
  std::string e = load_error(dir_);
  EXPECT_NE(e.find("model.merges[2]"), std::string::npos) << e;
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("b c");  // "bc" is not in the vocabulary
  write_json(j);
  e = load_error(dir_);
  EXPECT_NE(e.find("model.merges[2]"), std::string::npos) << e;
  EXPECT_NE(e.find("'bc'"), std::string::npos) << e;
}

TEST_F(LoadErrors, BadRegexAndUnsupportedModel) {
  auto j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "[a-"}}}, {"behavior", "Isolated"}}, {{"type", "ByteLevel"}}}}};
  write_json(j);
  std::string e = load_error(dir_);
  EXPECT_NE(e.find("pretokenizers[0].pattern.Regex"), std::string::npos) << e;
  j = tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  write_json(j);
  e = load_error(dir_);
  EXPECT_NE(e.find("model.type"), std::string::npos) << e;
  j = tiny_tokenizer_json();
  j["decoder"] = {{"type", "Metaspace"}};
  write_json(j);
  e = load_error(dir_);
  EXPECT_NE(e.find("decoder"), std::string::npos) << e;
}

TEST_F(LoadErrors, NfcNormalizerIsAppliedOrRefusedClearly) {
  auto j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  write_json(j);
  try {
    const auto tok = text::load_tokenizer(dir_);
    // "e" + U+0301 composes to U+00E9 = "é" (id 257).
    EXPECT_EQ(tok->encode("e\u0301"), (std::vector<int32_t>{257}));
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NFC"), std::string::npos) << e.what();
  }
  j["normalizer"] = {{"type", "Lowercase"}};
  write_json(j);
  const std::string e = load_error(dir_);
  EXPECT_NE(e.find("normalizer"), std::string::npos) << e;
  EXPECT_NE(e.find("'Lowercase'"), std::string::npos) << e;
}

TEST_F(LoadErrors, TiktokenBadBase64AndMissingConfig) {
  write_file(dir_ / "tiktoken.model", "YQ== 0\nYg== 1\n@@@@ 2\n");
  write_file(dir_ / "tokenizer_config.json", "{}");
  std::string e = load_error(dir_);
  EXPECT_NE(e.find("tiktoken.model: line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("base64"), std::string::npos) << e;
  write_file(dir_ / "tiktoken.model", "YQ== 0\nYg== x\n");
  e = load_error(dir_);
  EXPECT_NE(e.find("tiktoken.model: line 2"), std::string::npos) << e;
  // All 256 single bytes, then no tokenizer_config.json.
  std::string model;
  for (int b = 0; b < 256; ++b) {
    static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    model += std::string(1, kB64[b >> 2]) + kB64[(b & 3) << 4] + "== " + std::to_string(b) + "\n";
  }
  write_file(dir_ / "tiktoken.model", model);
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  e = load_error(dir_);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
  write_file(dir_ / "tokenizer_config.json", R"({"added_tokens_decoder": {"256": {"content": "<s>"}}})");
  const auto tok = text::load_tokenizer(dir_);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->encode("a<s>b"), (std::vector<int32_t>{'a', 256, 'b'}));
  EXPECT_EQ(tok->id_to_token(300), "<|reserved_token_300|>");
  write_file(dir_ / "tokenizer_config.json", R"({"added_tokens_decoder": [1, 2]})");
  e = load_error(dir_);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
}

// Qwen-style tokenizer_config.json: "bos_token": null means the tokenizer has no BOS (no id, nothing
// added), not a load error. The DeepSeek-V3 tokenizer is used for its known ids: "Hello world" is
// 19923 2058 and <｜end▁of▁sentence｜> is 1 (BOS <｜begin▁of▁sentence｜> would be 0).
TEST_F(LoadErrors, NullSpecialTokensMeanNone) {
  std::filesystem::copy_file(fixtures_dir() / "tokenizers" / "deepseek-v3" / "tokenizer.json", dir_ / "tokenizer.json");
  text::EncodeOptions with_special;
  with_special.add_special_tokens = true;
  write_file(dir_ / "tokenizer_config.json",
             R"({"bos_token": null, "eos_token": {"content": "<｜end▁of▁sentence｜>"}, "add_eos_token": true})");
  auto tok = text::load_tokenizer(dir_);
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_EQ(tok->bos_token(), "");
  ASSERT_TRUE(tok->eos_id().has_value());
  EXPECT_EQ(*tok->eos_id(), 1);
  EXPECT_EQ(tok->encode("Hello world", with_special), (std::vector<int32_t>{19923, 2058, 1}));

  write_file(dir_ / "tokenizer_config.json", R"({"bos_token": null, "eos_token": null, "add_bos_token": false})");
  tok = text::load_tokenizer(dir_);
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_FALSE(tok->eos_id().has_value());
  EXPECT_EQ(tok->encode("Hello world", with_special), (std::vector<int32_t>{19923, 2058}));

  // Any other type is still an error naming the file and the field.
  write_file(dir_ / "tokenizer_config.json", R"({"bos_token": 5})");
  const std::string e = load_error(dir_);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("'bos_token'"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera::test
