// Pieces of the tokenizers checked against values from the reference documentation
// (shared/reference/frontend.md) and from the Unicode / base64 / GPT-2 definitions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/hf_pre_tokenizer.h"
#include "text/tokenizer/load_util.h"
#include "text/tokenizer/regex.h"
#include "text/tokenizer/tiktoken_tokenizer.h"
#include "text/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

namespace tessera::test {
namespace {

using Pieces = std::vector<std::string>;

Pieces regex_pieces(const text::Regex& re, std::string_view s) {
  Pieces out;
  re.for_each_match(s, [&](size_t b, size_t e) { out.emplace_back(s.substr(b, e - b)); });
  return out;
}

// frontend.md §1.4: Kimi pre-tokenizer splits.
TEST(KimiPattern, SplitsLikeReference) {
  const text::Regex re(text::kKimiPattern, "kimi");
  EXPECT_EQ(regex_pieces(re, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(regex_pieces(re, "getUserName iPhone"), (Pieces{"get", "User", "Name", " i", "Phone"}));
  EXPECT_EQ(regex_pieces(re, "中文abc混合Text"), (Pieces{"中文", "abc", "混合", "Text"}));
  EXPECT_EQ(regex_pieces(re, "I'M fine, it's 12345 ok"),
            (Pieces{"I'M", " fine", ",", " it's", " ", "123", "45", " ok"}));
  EXPECT_EQ(regex_pieces(re, "  leading\n\n  spaces  "), (Pieces{" ", " leading", "\n\n", " ", " spaces", "  "}));
  EXPECT_EQ(regex_pieces(re, "日本語テスト"), (Pieces{"日本語", "テスト"}));
  EXPECT_EQ(regex_pieces(re, "x=1+2;\r\n"), (Pieces{"x", "=", "1", "+", "2", ";\r\n"}));
  EXPECT_EQ(regex_pieces(re, "HTTPServer"), (Pieces{"HTTPServer"}));
  EXPECT_EQ(regex_pieces(re, "naïve café"), (Pieces{"naïve", " café"}));
}

// The intersection must exclude Han from the letter classes: a Han char after Latin letters starts
// a new piece instead of extending the word.
TEST(KimiPattern, IntersectionExcludesHanOnly) {
  const text::Regex re(text::kKimiPattern, "kimi");
  EXPECT_EQ(regex_pieces(re, "ab中cd"), (Pieces{"ab", "中", "cd"}));
  // U+3001 (ideographic comma) has Han only in Script_Extensions: it must not join the Han run.
  EXPECT_EQ(regex_pieces(re, "中、文"), (Pieces{"中", "、", "文"}));
}

TEST(RegexTranslate, Constructs) {
  EXPECT_EQ(text::translate_pattern(R"(\p{Han}+)"), R"(\p{sc:Han}+)");
  EXPECT_EQ(text::translate_pattern(R"(\p{L}\pN)"), R"(\p{L}\p{N})");
  EXPECT_EQ(text::translate_pattern(R"([\p{Lu}&&[^\p{Han}]])"), R"((?:(?=[^\p{sc:Han}])[\p{Lu}]))");
  EXPECT_THROW(text::translate_pattern("[abc"), core::Error);
  EXPECT_THROW(text::translate_pattern(R"([\S])"), core::Error);
  // \s means White_Space: U+180E (Mongolian vowel separator) is not white space since Unicode 6.3.
  const text::Regex ws(R"(\s+)", "ws");
  EXPECT_EQ(regex_pieces(ws, "a \t\u3000b\u180Ec"), (Pieces{" \t\u3000"}));
}

// frontend.md §2.2: DeepSeek-V3 pre-tokenizer splits (sequential isolated splits).
TEST(DeepSeekPreTokenizer, SplitsLikeReference) {
  const auto path = fixtures_dir() / "tokenizers" / "deepseek-v3" / "tokenizer.json";
  const auto j = text::parse_json_file(path);
  const auto pre = text::make_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer");
  auto split = [&](std::string_view s) {
    text::Arena arena;
    std::vector<std::string_view> views;
    text::pre_tokenize(pre.get(), s, arena, views);
    return Pieces(views.begin(), views.end());
  };
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("getUserName iPhone"), (Pieces{"getUserName", " iPhone"}));
  EXPECT_EQ(split("中文abc混合Text"), (Pieces{"中文", "abc", "混合", "Text"}));
  EXPECT_EQ(split("I'M fine, it's 12345 ok"), (Pieces{"I", "'M", " fine", ",", " it", "'s", " ", "123", "45", " ok"}));
  EXPECT_EQ(split("  leading\n\n  spaces  "), (Pieces{" ", " leading", "\n\n", " ", " spaces", "  "}));
  EXPECT_EQ(split("日本語テスト"), (Pieces{"日本語テスト"}));
  EXPECT_EQ(split("x=1+2;\r\n"), (Pieces{"x", "=", "1", "+", "2", ";\r\n"}));
  EXPECT_EQ(split("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(split("$x.y"), (Pieces{"$x", ".y"}));
}

// HF Split behaviours on a "-" delimiter, per the tokenizers documentation examples.
TEST(SplitBehaviors, AllBehaviors) {
  auto split = [](const char* behavior, bool invert, std::string_view s) {
    const nlohmann::json spec = {
        {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    const auto pre = text::make_pre_tokenizer(spec, "test");
    text::Arena arena;
    std::vector<std::string_view> views;
    text::pre_tokenize(pre.get(), s, arena, views);
    return Pieces(views.begin(), views.end());
  };
  const std::string s = "the-final--countdown";
  EXPECT_EQ(split("Removed", false, s), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated", false, s), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious", false, s), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext", false, s), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous", false, s), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split("Removed", true, s), (Pieces{"-", "-", "-"}));
  EXPECT_THROW(split("Sideways", false, s), core::Error);
}

TEST(ByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(text::byte_to_unicode(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(text::byte_to_unicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(text::byte_to_unicode('!'), U'!');
  EXPECT_EQ(text::byte_to_unicode(0xAD), U'\u0143');  // the last remapped byte: 'Ń'
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(text::unicode_to_byte(text::byte_to_unicode(static_cast<unsigned char>(b))), b);
  std::string out;
  EXPECT_TRUE(text::byte_level_decode("ĠHello", out));
  EXPECT_EQ(out, " Hello");
  EXPECT_FALSE(text::byte_level_decode("｜", out));
}

TEST(Utf8, LossyUsesMaximalSubparts) {
  // Unicode §3.9 / Table 3-8 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a,FFFD,FFFD,FFFD,b,FFFD,c,FFFD,FFFD,d
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(text::utf8_lossy(in), "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
  EXPECT_EQ(text::utf8_lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(text::utf8_lossy("\xE4\xB8"), "\uFFFD");                  // truncated
  EXPECT_EQ(text::utf8_valid_prefix("ab\xC0"), 2u);
}

TEST(Bpe, LinearAndHeapMergesAgree) {
  // Tiny model over bytes a,b,c: merges ab(0) bc(1) abc(2) ca(3) cab... ranks chosen to create ties.
  text::BpeModel m;
  m.byte_ids.fill(-1);
  m.byte_ids['a'] = 0;
  m.byte_ids['b'] = 1;
  m.byte_ids['c'] = 2;
  m.pairs.insert(0, 1, {0, 3});  // a b -> ab
  m.pairs.insert(1, 2, {1, 4});  // b c -> bc
  m.pairs.insert(3, 2, {2, 5});  // ab c -> abc
  m.pairs.insert(2, 0, {3, 6});  // c a -> ca
  m.pairs.insert(6, 3, {4, 7});  // ca ab -> caab
  m.pairs.insert(0, 0, {5, 8});  // a a -> aa
  m.pairs.insert(8, 8, {6, 9});  // aa aa -> aaaa
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> a(1 + rng() % 40);
    for (auto& x : a) x = static_cast<int32_t>(rng() % 3);
    std::vector<int32_t> b = a;
    m.merge_linear(a);
    m.merge_heap(b);
    ASSERT_EQ(a, b) << "trial " << trial;
  }
  // Known answers: leftmost of equal ranks first.
  std::vector<int32_t> s{0, 0, 0};  // aaa -> aa a
  m.merge_linear(s);
  EXPECT_EQ(s, (std::vector<int32_t>{8, 0}));
  s = {0, 1, 2};  // abc: ab (rank 0) first, then ab c
  m.merge_heap(s);
  EXPECT_EQ(s, (std::vector<int32_t>{5}));
}

// Long runs go through the heap merge; they must round-trip and agree with per-piece encoding of
// the reference golden for short runs (checked in golden_test); here: round trip and speed sanity.
TEST(Tokenizers, LongRunsRoundTrip) {
  for (const char* name : {"deepseek-v3", "o200k", "kimi-style-tiktoken"}) {
    const auto& tok = fixture_tokenizer(name);
    for (const std::string& s : {std::string(5000, 'a'), std::string(3000, ' ') + "x", std::string(2000, '9'), [] {
                                   std::string t;
                                   for (int i = 0; i < 1500; ++i) t += "中";
                                   return t;
                                 }()}) {
      const auto ids = tok.encode(s);
      EXPECT_EQ(tok.decode(ids), s) << name;
      EXPECT_LT(ids.size(), s.size()) << name;
    }
  }
}

TEST(Tokenizers, SpecialTokenOptions) {
  const auto& ds = fixture_tokenizer("deepseek-v3");
  // <｜begin▁of▁sentence｜> is special: parsed by default, plain text with parse_special=false.
  EXPECT_EQ(ds.encode("<｜begin▁of▁sentence｜>"), (std::vector<int32_t>{0}));
  text::EncodeOptions plain;
  plain.parse_special = false;
  const auto as_text = ds.encode("<｜begin▁of▁sentence｜>", plain);
  EXPECT_GT(as_text.size(), 1u);
  EXPECT_EQ(ds.decode(as_text), "<｜begin▁of▁sentence｜>");
  // tokenizer_config.json: add_bos_token true, BOS is id 0.
  ASSERT_TRUE(ds.bos_id().has_value());
  EXPECT_EQ(*ds.bos_id(), 0);
  EXPECT_TRUE(ds.add_bos());
  text::EncodeOptions with_bos;
  with_bos.add_special_tokens = true;
  EXPECT_EQ(ds.encode("Hello world", with_bos), (std::vector<int32_t>{0, 19923, 2058}));
  EXPECT_EQ(ds.decode(std::vector<int32_t>{0, 19923, 2058}, /*skip_special=*/true), "Hello world");
  // <｜User｜> is a non-special added token: kept when skipping special tokens.
  EXPECT_FALSE(ds.is_special(128803));
  EXPECT_EQ(ds.decode(std::vector<int32_t>{128803}, true), "<｜User｜>");

  const auto& kimi = fixture_tokenizer("kimi-style-tiktoken");
  EXPECT_EQ(kimi.vocab_size(), 199998 + 256);
  EXPECT_EQ(kimi.token_to_id("<|im_end|>"), 200000);
  EXPECT_EQ(kimi.id_to_token(200003), "<|reserved_token_200003|>");
  EXPECT_EQ(kimi.encode("<|reserved_token_200003|>"), (std::vector<int32_t>{200003}));
  EXPECT_EQ(kimi.bos_id(), 199998);
  EXPECT_EQ(kimi.eos_id(), 199999);
  EXPECT_FALSE(kimi.is_special(200009));  // <|tool_calls_section_begin|> has special: false
  EXPECT_EQ(kimi.decode(std::vector<int32_t>{200000, 200009}, true), "<|tool_calls_section_begin|>");
  EXPECT_EQ(kimi.decode(kimi.encode("x<|im_end|>y", plain)), "x<|im_end|>y");
  EXPECT_NE(kimi.encode("x<|im_end|>y", plain), kimi.encode("x<|im_end|>y"));
  // Byte-level vocabulary view, as Kimi's get_vocab shows it.
  EXPECT_EQ(kimi.id_to_token(kimi.encode(" world")[0]), "Ġworld");
  EXPECT_EQ(kimi.token_to_id("Ġworld"), kimi.encode(" world")[0]);

  EXPECT_THROW(ds.encode("bad \xFF utf8"), core::Error);
  EXPECT_THROW(ds.decode(std::vector<int32_t>{-1}), core::Error);
  EXPECT_THROW(kimi.decode(std::vector<int32_t>{kimi.vocab_size()}), core::Error);
}

// encode() is const and thread-safe: the server tokenizes on many HTTP threads with one tokenizer.
TEST(Tokenizers, ConcurrentEncodeAgrees) {
  for (const char* name : {"deepseek-v3", "kimi-style-tiktoken"}) {
    const auto& tok = fixture_tokenizer(name);
    std::string text;
    for (int i = 0; i < 200; ++i) text += "Hello, 世界! getUserName() = " + std::to_string(i * 7919) + ";\n";
    const auto want = tok.encode(text);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int k = 0; k < 5; ++k) ok[t] += tok.encode(text) == want;
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 5) << name << " thread " << t;
  }
}

// Kimi's _split_whitespaces_or_nonwhitespaces, on small limits.
TEST(KimiSlices, SplitsLongRuns) {
  auto slices = [](std::string_view s, size_t chunk, size_t run) {
    auto v = text::kimi_slices(s, chunk, run);
    return Pieces(v.begin(), v.end());
  };
  EXPECT_EQ(slices("abcdefg", 100, 3), (Pieces{"abc", "def", "g"}));
  EXPECT_EQ(slices("ab  cd", 100, 3), (Pieces{"ab  cd"}));
  EXPECT_EQ(slices("ab     cd", 100, 3), (Pieces{"ab   ", "  cd"}));
  EXPECT_EQ(slices("中文字符串", 100, 2), (Pieces{"中文", "字符", "串"}));
  EXPECT_EQ(slices("abcdef", 4, 100), (Pieces{"abcd", "ef"}));
  EXPECT_EQ(slices("", 4, 100), (Pieces{""}));
  // The real limits: a 30,000-letter run is encoded as two slices (25,000 + 5,000).
  const auto& kimi = fixture_tokenizer("kimi-style-tiktoken");
  const std::string run(30000, 'x');
  auto ids = kimi.encode(run);
  auto a = kimi.encode(run.substr(0, 25000)), b = kimi.encode(run.substr(25000));
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(ids, a);
}

}  // namespace
}  // namespace tessera::test
