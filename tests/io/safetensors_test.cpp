// The safetensors reader on good files and on every kind of broken file: each error must name the
// file (and the tensor where one is at fault), and nothing may crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A safetensors file from a raw header string and data bytes (lets tests write any header).
std::string raw_safetensors(const std::string& header, const std::string& data, uint64_t declared_len = UINT64_MAX) {
  uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("tessera-st"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `content`, opens it, expects an error containing every `needle`.
  void expect_error(const std::string& content, std::initializer_list<std::string> needles) {
    const fs::path p = dir_ / "broken.safetensors";
    test::write_file(p, content);
    try {
      (void)io::SafetensorsFile::open(p);
      FAIL() << "no error for a broken file";
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p.string()), std::string::npos) << "message does not name the file: " << msg;
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsWhatItWrites) {
  const fs::path p = dir_ / "ok.safetensors";
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  io::write_safetensors(
      p, {io::f32_tensor("a", {2, 3}, a), io::f32_tensor("scalar", {}, {42.0f}), io::i32_tensor("empty", {0, 4}, {})},
      {{"format", "pt"}});
  auto f = io::SafetensorsFile::open(p);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_TRUE(f->has("a"));
  auto t = f->tensor("a");
  EXPECT_EQ(t.shape(), (core::Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(t.data<float>(), t.data<float>() + 6), a);
  EXPECT_EQ(f->tensor("scalar").shape(), core::Shape{});
  EXPECT_EQ(f->tensor("scalar").data<float>()[0], 42.0f);
  EXPECT_EQ(f->tensor("empty").numel(), 0);
}

TEST_F(SafetensorsTest, ReadsAHandWrittenHeaderWithPaddingAndBf16) {
  // BF16 1.0 = 0x3f80, -2.0 = 0xc000, little-endian; header right-padded with spaces.
  std::string header = R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  while (header.size() % 8) header += ' ';
  const fs::path p = dir_ / "bf16.safetensors";
  test::write_file(p, raw_safetensors(header, std::string("\x80\x3f\x00\xc0", 4)));
  auto f = io::SafetensorsFile::open(p);
  auto t = f->tensor("w");
  EXPECT_EQ(core::bf16_to_f32(t.data<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(core::bf16_to_f32(t.data<uint16_t>()[1]), -2.0f);
}

TEST_F(SafetensorsTest, TooShortForAHeader) { expect_error("abc", {"too short"}); }

TEST_F(SafetensorsTest, HeaderLengthPastTheFile) {
  expect_error(raw_safetensors("{}", "", 5000), {"header length 5000", "past the end"});
}

TEST_F(SafetensorsTest, HeaderLengthOverTheLimit) {
  expect_error(raw_safetensors("{}", "", 200'000'000), {"200000000", "limit"});
}

TEST_F(SafetensorsTest, InvalidJson) { expect_error(raw_safetensors("{\"a\": [1, 2", ""), {"not valid JSON"}); }

TEST_F(SafetensorsTest, HeaderNotAnObject) { expect_error(raw_safetensors("[1, 2]", ""), {"JSON object"}); }

TEST_F(SafetensorsTest, UnknownDtype) {
  expect_error(raw_safetensors(R"({"t":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", "ab"), {"'t'", "Q4_K"});
}

TEST_F(SafetensorsTest, MissingField) {
  expect_error(raw_safetensors(R"({"t":{"dtype":"U8","data_offsets":[0,2]}})", "ab"), {"'t'", "shape"});
}

TEST_F(SafetensorsTest, NegativeDimension) {
  expect_error(raw_safetensors(R"({"t":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", "ab"), {"'t'", "negative"});
}

TEST_F(SafetensorsTest, ByteRangeDoesNotMatchShapeTimesDtype) {
  expect_error(raw_safetensors(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x')),
               {"'t'", "needs 24"});
}

TEST_F(SafetensorsTest, OffsetsEndBeforeTheyBegin) {
  expect_error(raw_safetensors(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", "abcd"), {"'t'"});
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  expect_error(raw_safetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                               "abcdef"),
               {"overlap", "'a'", "'b'"});
}

TEST_F(SafetensorsTest, TruncatedDownloadSaysHowManyBytesAreMissing) {
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                               R"("b":{"dtype":"F32","shape":[100],"data_offsets":[16,416]}})",
                               std::string(116, 'x')),
               {"'b'", "300 bytes shorter", "truncated"});
}

TEST_F(SafetensorsTest, GitLfsPointerInsteadOfData) {
  expect_error("version https://git-lfs.github.com/spec/v1\noid sha256:0123abcd\nsize 5000000000\n",
               {"Git LFS pointer"});
}

TEST_F(SafetensorsTest, MetadataMustBeStrings) {
  expect_error(raw_safetensors(R"({"__metadata__":{"format":3}})", ""), {"__metadata__", "format"});
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  const fs::path p = dir_ / "ok.safetensors";
  io::write_safetensors(p, {io::f32_tensor("a", {1}, {1.0f})});
  auto f = io::SafetensorsFile::open(p);
  try {
    (void)f->tensor("nope");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera
