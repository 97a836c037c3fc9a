// The incremental detokenizer on multi-byte text fed one byte-token at a time (so every byte
// offset is a token boundary), on real tokenizations, with stop strings spanning tokens.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/detokenizer.h"
#include "tokenizer_fixture.h"

namespace tessera::test {
namespace {

const char* kTokenizers[] = {"deepseek-v3", "o200k", "kimi-style-tiktoken"};

// Multi-byte text: CJK, emoji (4-byte, ZWJ sequence, flag, skin tone), combining marks, RTL.
const std::vector<std::string> kTexts = {
    "你好，世界！日本語のテキスト",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇯🇵 done",
    "combining: e\u0301 n\u0303 a\u0308\u0301 Z\u0351\u0352\u0353",
    "mixed العربية עברית 한국어 ελληνικά",
    "x",
};

// Id of the token made of exactly one byte (every byte-level vocabulary has them).
int32_t byte_token(const text::Tokenizer& tok, unsigned char b) {
  const auto id = tok.token_to_id(text::byte_level_encode(std::string(1, static_cast<char>(b))));
  EXPECT_TRUE(id.has_value());
  EXPECT_EQ(tok.token_bytes(*id), std::string(1, static_cast<char>(b)));
  return *id;
}

// Byte offsets where code points start, plus the end.
std::vector<size_t> boundaries(const std::string& s) {
  std::vector<size_t> b;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  b.push_back(s.size());
  return b;
}

TEST(Detokenizer, ByteTokensEmitOnlyCompleteCodePoints) {
  for (const char* name : kTokenizers) {
    const auto& tok = fixture_tokenizer(name);
    for (const auto& text : kTexts) {
      text::IncrementalDetokenizer d(tok, {});
      const auto bounds = boundaries(text);
      std::string got;
      for (size_t k = 0; k < text.size(); ++k) {
        const std::string piece = d.add(byte_token(tok, static_cast<unsigned char>(text[k])));
        EXPECT_EQ(piece.find("\uFFFD"), std::string::npos);
        got += piece;
        // After k+1 bytes, exactly the code points wholly inside them are out.
        size_t complete = 0;
        for (size_t b : bounds)
          if (b <= k + 1) complete = b;
        ASSERT_EQ(got, text.substr(0, complete)) << name << " after byte " << k;
      }
      got += d.finish();
      EXPECT_EQ(got, text) << name;
      EXPECT_EQ(d.output(), text);
      EXPECT_FALSE(d.stopped());
    }
  }
}

TEST(Detokenizer, RealTokenizationsRoundTrip) {
  for (const char* name : kTokenizers) {
    const auto& tok = fixture_tokenizer(name);
    for (const auto& text : kTexts) {
      text::IncrementalDetokenizer d(tok, {});
      std::string got;
      for (int32_t id : tok.encode(text)) {
        const std::string piece = d.add(id);
        EXPECT_EQ(piece.find("\uFFFD"), std::string::npos) << name;
        got += piece;
      }
      got += d.finish();
      EXPECT_EQ(got, text) << name;
    }
  }
}

TEST(Detokenizer, InvalidBytesBecomeReplacementOnlyWhenCertain) {
  const auto& tok = fixture_tokenizer("kimi-style-tiktoken");
  text::IncrementalDetokenizer d(tok, {});
  EXPECT_EQ(d.add(byte_token(tok, 'a')), "a");
  EXPECT_EQ(d.add(byte_token(tok, 0xFF)), "\uFFFD");  // can never start a sequence
  EXPECT_EQ(d.add(byte_token(tok, 0xE4)), "");        // may still complete
  EXPECT_EQ(d.add(byte_token(tok, 0xB8)), "");
  EXPECT_EQ(d.add(byte_token(tok, 'b')), "\uFFFDb");  // E4 B8 then 'b': one maximal subpart
  EXPECT_EQ(d.add(byte_token(tok, 0xF0)), "");
  EXPECT_EQ(d.finish(), "\uFFFD");  // truncated at the end of the stream
  EXPECT_EQ(d.output(), "a\uFFFD\uFFFDb\uFFFD");
}

TEST(Detokenizer, SpecialTokensSkippedOrKept) {
  const auto& tok = fixture_tokenizer("kimi-style-tiktoken");
  const auto ids = tok.encode("Hi<|im_end|><|tool_calls_section_begin|>");
  for (bool skip : {true, false}) {
    text::DetokenizerOptions o;
    o.skip_special_tokens = skip;
    text::IncrementalDetokenizer d(tok, o);
    std::string got;
    for (int32_t id : ids) got += d.add(id);
    got += d.finish();
    EXPECT_EQ(got, skip ? "Hi<|tool_calls_section_begin|>" : "Hi<|im_end|><|tool_calls_section_begin|>");
  }
}

// Feeds `text` as single-byte tokens with stop strings; returns (all output, stopped index).
struct StopResult {
  std::string text;
  std::optional<size_t> stop;
  std::vector<std::string> pieces;
};
StopResult run_bytes(const text::Tokenizer& tok, const std::string& text, text::DetokenizerOptions o) {
  text::IncrementalDetokenizer d(tok, std::move(o));
  StopResult r;
  for (unsigned char c : text) {
    r.pieces.push_back(d.add(byte_token(tok, c)));
    r.text += r.pieces.back();
  }
  r.pieces.push_back(d.finish());
  r.text += r.pieces.back();
  r.stop = d.stop_index();
  EXPECT_EQ(r.text, d.output());
  return r;
}

TEST(Detokenizer, StopStringsAcrossTokenBoundaries) {
  const auto& tok = fixture_tokenizer("deepseek-v3");
  text::DetokenizerOptions o;
  o.stop_strings = {"</answer>", "停止", "\n\n"};
  {
    const auto r = run_bytes(tok, "The answer is 42</answer> and more", o);
    EXPECT_EQ(r.text, "The answer is 42");
    EXPECT_EQ(r.stop, 0u);
  }
  {
    const auto r = run_bytes(tok, "请停止生成", o);  // multi-byte stop string split across byte tokens
    EXPECT_EQ(r.text, "请");
    EXPECT_EQ(r.stop, 1u);
  }
  {
    // Near misses: "</ans" and "停" are held back, then released when they turn out not to stop.
    const auto r = run_bytes(tok, "a</ans b 停下\nc", o);
    EXPECT_EQ(r.text, "a</ans b 停下\nc");
    EXPECT_FALSE(r.stop.has_value());
  }
  {
    // Text ending in a stop-string prefix is released at finish.
    const auto r = run_bytes(tok, "end</answ", o);
    EXPECT_EQ(r.text, "end</answ");
    EXPECT_EQ(r.pieces.back(), "</answ");
  }
  {
    o.include_stop_string = true;
    const auto r = run_bytes(tok, "x\n\ny", o);
    EXPECT_EQ(r.text, "x\n\n");
    EXPECT_EQ(r.stop, 2u);
    o.include_stop_string = false;
  }
  {
    // The earliest occurrence wins even when a later-listed stop string completes first.
    text::DetokenizerOptions o2;
    o2.stop_strings = {"abcd", "bc"};
    const auto r = run_bytes(tok, "xabcdy", o2);
    EXPECT_EQ(r.text, "xa");
    EXPECT_EQ(r.stop, 1u);
  }
  // Real multi-byte tokens: the stop string starts in the middle of a token.
  {
    const std::string text = "Answer: 你好世界 END tail";
    text::DetokenizerOptions o3;
    o3.stop_strings = {"好世"};
    text::IncrementalDetokenizer d(tok, o3);
    std::string got;
    for (int32_t id : tok.encode(text)) got += d.add(id);
    got += d.finish();
    EXPECT_EQ(got, "Answer: 你");
    EXPECT_TRUE(d.stopped());
    EXPECT_EQ(d.stop_string(), "好世");
    EXPECT_EQ(d.add(tok.encode("more")[0]), "");  // after a stop everything is ignored
  }
}

TEST(Detokenizer, UnknownIdThrowsAndKeepsState) {
  const auto& tok = fixture_tokenizer("o200k");
  text::IncrementalDetokenizer d(tok, {});
  EXPECT_EQ(d.add(byte_token(tok, 0xE4)), "");
  EXPECT_THROW(d.add(-5), core::Error);
  EXPECT_THROW(d.add(tok.vocab_size()), core::Error);
  EXPECT_THROW(d.add(200005), core::Error);  // a hole between the vocabulary and <|endofprompt|>
  EXPECT_EQ(d.add(byte_token(tok, 0xB8)), "");
  EXPECT_EQ(d.add(byte_token(tok, 0xAD)), "中");
}

// Whatever the ids, the streamed output equals the one-shot decode.
TEST(Detokenizer, MatchesOneShotDecodeOnRandomIds) {
  std::mt19937 rng(1234);
  for (const char* name : kTokenizers) {
    const auto& tok = fixture_tokenizer(name);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int32_t> ids;
      const int n = 1 + static_cast<int>(rng() % 20);
      while (static_cast<int>(ids.size()) < n) {
        const int32_t id = static_cast<int32_t>(rng() % tok.vocab_size());
        if (tok.has_id(id)) ids.push_back(id);
      }
      const bool skip = trial % 2;
      text::DetokenizerOptions o;
      o.skip_special_tokens = skip;
      text::IncrementalDetokenizer d(tok, o);
      std::string got;
      for (int32_t id : ids) got += d.add(id);
      got += d.finish();
      ASSERT_EQ(got, tok.decode(ids, skip)) << name << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace tessera::test
