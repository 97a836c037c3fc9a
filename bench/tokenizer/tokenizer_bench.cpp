// Encode throughput (MB/s of UTF-8 input), single-threaded, for English prose, source code and CJK
// text, for each tokenizer kind. The text is generated deterministically here (no downloads): a
// seeded random mix of words / code lines / CJK phrases, ~256 KiB per input.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/env.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using tessera::text::Tokenizer;

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) {
    const std::filesystem::path root = tessera::core::env_value("TESSERA_FIXTURES").value_or(TESSERA_FIXTURES_DIR);
    t = tessera::text::load_tokenizer(root / "tokenizers" / name);
  }
  return *t;
}

std::string make_text(const std::vector<std::string>& units, const std::vector<std::string>& seps, size_t bytes,
                      unsigned seed) {
  std::mt19937 rng(seed);
  std::string out;
  while (out.size() < bytes) {
    out += units[rng() % units.size()];
    out += seps[rng() % seps.size()];
  }
  return out;
}

constexpr size_t kBytes = 256 * 1024;

const std::string& english() {
  static const std::string s =
      make_text({"the",       "model",    "serves",    "requests", "quickly",     "and",
                 "of",        "a",        "tokenizer", "which",    "splits",      "text",
                 "into",      "pieces",   "before",    "merging",  "bytes",       "Mixture-of-Experts",
                 "inference", "server's", "they're",   "it",       "was",         "However",
                 "In",        "1987",     "people",    "would",    "information", "between",
                 "reasonably"},
                {" ", " ", " ", " ", ", ", ". ", ".\n", "; ", " (", ") "}, kBytes, 1);
  return s;
}

const std::string& code() {
  static const std::string s =
      make_text({"for (size_t i = 0; i < n; ++i) {", "  out.push_back(ids[i]);", "}", "return std::nullopt;",
                 "def encode(self, text: str) -> List[int]:", "    return [self.vocab[t] for t in tokens]",
                 "if (!tok.has_id(id)) unknown_id(id);", "const auto& [key, value] = *it;",
                 "x = np.zeros((4, 4), dtype=np.float32)", "#include <vector>", "// TODO(perf): avoid the copy",
                 "    self.cache = {}", "\tint rc = pcre2_match(code, s, n, 0, 0, md, ctx);"},
                {"\n", "\n", "\n    ", "\n\n"}, kBytes, 2);
  return s;
}

const std::string& cjk() {
  static const std::string s =
      make_text({"我们", "模型",   "推理",     "服务器", "分词器", "中文文本", "的",   "是",       "在",   "这个",
                 "问题", "日本語", "テキスト", "東京",   "한국어", "처리",     "速度", "专家混合", "请求", "数据"},
                {"", "", "", "，", "。", "、", "！", " ", "\n"}, kBytes, 3);
  return s;
}

void encode_bench(benchmark::State& state, const char* tok_name, const std::string& (*text)()) {
  const Tokenizer& tok = tokenizer(tok_name);
  const std::string& t = text();
  size_t ntokens = 0;
  for (auto _ : state) {
    auto ids = tok.encode(t);
    ntokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size()));
  state.counters["tokens"] = static_cast<double>(ntokens);
  state.counters["bytes_per_token"] = static_cast<double>(t.size()) / static_cast<double>(ntokens);
}

BENCHMARK_CAPTURE(encode_bench, deepseek_english, "deepseek-v3", &english)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, deepseek_code, "deepseek-v3", &code)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, deepseek_cjk, "deepseek-v3", &cjk)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, o200k_english, "o200k", &english)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, o200k_code, "o200k", &code)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, o200k_cjk, "o200k", &cjk)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, kimi_tiktoken_english, "kimi-style-tiktoken", &english)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, kimi_tiktoken_code, "kimi-style-tiktoken", &code)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_bench, kimi_tiktoken_cjk, "kimi-style-tiktoken", &cjk)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
