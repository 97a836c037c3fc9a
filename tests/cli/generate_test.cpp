// `tessera generate` samples through the engine: its tokens are the ones an engine built here, as the
// server builds one, draws for the same prompt, seed and temperature; greedy still gives the golden
// tokens; seeds are reproducible and matter.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera {
namespace {

std::vector<int32_t> golden_ids(const io::SafetensorsFile& golden, const std::string& name) {
  const core::Tensor t = golden.tensor(name);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

std::string id_list(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// Runs `tessera generate --json` and returns its object; fails the test on a non-zero exit.
nlohmann::json generate_json(const std::filesystem::path& model, const std::vector<int32_t>& prompt,
                             const std::string& flags) {
  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " --log-level warn generate --json --model " +
                                       model.string() + " --prompt-ids " + id_list(prompt) + " " + flags,
                                   &out);
  EXPECT_EQ(rc, 0) << out;
  const auto brace = out.find('{');
  if (rc != 0 || brace == std::string::npos) return nlohmann::json::object();
  return nlohmann::json::parse(out.substr(brace));
}

std::vector<int32_t> tokens_of(const nlohmann::json& j) {
  return j.contains("tokens") ? j["tokens"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}

TEST(Generate, SampledTokensAreTheOnesTheEngineDraws) {
  for (const std::string name : {"dsv3-tiny", "kimi-k25-tiny-nvfp4"}) {
    SCOPED_TRACE(name);
    const auto dir = test::fixtures_dir() / "models" / name;
    auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
    const auto prompt = golden_ids(*golden, "prompt.0");
    // Loaded as the CLI loads it by default (--kv-cache-dtype auto: fp8 for the Kimi-K2.5 fixture).
    const model::LoadedModel m = model::load_model(dir);
    for (uint64_t seed : {7ull, 20240611ull}) {
      SCOPED_TRACE("seed " + std::to_string(seed));
      // The server's request: the model's EOS ids, default engine settings and a pool of its own size.
      engine::Request r;
      r.prompt = prompt;
      r.params.temperature = 0.8f;
      r.params.seed = seed;
      r.params.max_tokens = 12;
      r.params.eos_token_ids.assign(m.config.eos_token_ids.begin(), m.config.eos_token_ids.end());
      const test::EngineRun want = test::run_engine(m, r);
      ASSERT_FALSE(want.tokens.empty());

      const auto j = generate_json(dir, prompt, "--temperature 0.8 --max-tokens 12 --seed " + std::to_string(seed));
      EXPECT_EQ(tokens_of(j), want.tokens);
      EXPECT_EQ(j.value("finish_reason", ""), engine::finish_reason_name(want.finish));
      // Chunked prefill changes the steps, not the draws.
      const auto chunked = generate_json(
          dir, prompt, "--temperature 0.8 --max-tokens 12 --prefill-chunk 3 --seed " + std::to_string(seed));
      EXPECT_EQ(tokens_of(chunked), want.tokens);
    }
  }
}

TEST(Generate, GreedyWithChunkedPrefillGivesTheGoldenTokens) {
  const auto dir = test::fixtures_dir() / "models" / "kimi-k2-tiny";
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  const auto prompt = golden_ids(*golden, "prompt.0");
  const auto greedy = golden_ids(*golden, "greedy.0");
  const core::Tensor margin = golden->tensor("greedy_margin.0");
  const auto j = generate_json(dir, prompt, "--ignore-eos --max-tokens 16 --prefill-chunk 4");
  const auto got = tokens_of(j);
  ASSERT_EQ(got.size(), greedy.size());
  EXPECT_EQ(j.value("finish_reason", ""), "length");
  for (size_t k = 0; k < greedy.size() && margin.data<float>()[k] > 1e-3f; ++k)
    EXPECT_EQ(got[k], greedy[k]) << "step " << k;
}

TEST(Generate, TheSameSeedRepeatsAndAnotherSeedDiffers) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  const std::string flags = "--ignore-eos --temperature 1.0 --max-tokens 10 --seed ";
  int differing = 0;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto prompt = golden_ids(*golden, "prompt." + std::to_string(i));
    const auto a = tokens_of(generate_json(dir, prompt, flags + "11"));
    ASSERT_EQ(a.size(), 10u);
    EXPECT_EQ(tokens_of(generate_json(dir, prompt, flags + "11")), a);
    const auto b = tokens_of(generate_json(dir, prompt, flags + "12"));
    ASSERT_EQ(b.size(), 10u);
    differing += a != b;
  }
  EXPECT_GE(differing, 1) << "seeds 11 and 12 drew the same tokens for every prompt";
}

TEST(Generate, PlainOutputPrintsTheSameTokens) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  const auto prompt = golden_ids(*golden, "prompt.1");
  const std::string flags = "--ignore-eos --temperature 0.8 --max-tokens 6 --seed 3";
  const auto want = tokens_of(generate_json(dir, prompt, flags));
  std::string out;
  // stdout only (run_command adds 2>&1 after the group): the timings line goes to stderr.
  const int rc =
      test::run_command("{ " + test::tessera_binary().string() + " --log-level warn generate --model " + dir.string() +
                            " --prompt-ids " + id_list(prompt) + " " + flags + " 2>/dev/null; }",
                        &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, id_list(want) + "\n");
}

// generate runs the plan `tessera plan` resolves for one sequence of prompt + --max-tokens tokens:
// one that cannot run is refused before loading, naming --max-tokens and what does not fit.
TEST(Generate, ASequenceThePlanCannotHoldIsRefusedNamingTheFlags) {
  const auto dir = (test::fixtures_dir() / "models" / "dsv3-tiny").string();
  std::string out;
  // dsv3-tiny allows 4096 positions (max_position_embeddings).
  int rc = test::run_command(
      test::tessera_binary().string() + " generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 5000", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--max-tokens 5000"), std::string::npos) << out;
  EXPECT_NE(out.find("max_position_embeddings"), std::string::npos) << out;
  // A KV pool of 50 KiB holds at most one page of 64 tokens (fp32 or bf16 entries of 4 x 80): not 103.
  rc = test::run_command(test::tessera_binary().string() + " generate --model " + dir +
                             " --prompt-ids 1,2,3 --max-tokens 100 --kv-cache-bytes 50KiB",
                         &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--kv-cache-bytes"), std::string::npos) << out;
  EXPECT_NE(out.find("--max-tokens 100"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// --tensor-parallel-size: the model split over CPU ranks (threads) samples the tokens of one rank,
// and a size that does not divide the heads is refused before loading, naming heads and ranks.
TEST(Generate, TensorParallelRanksDrawTheTokensOfOneRank) {
  const auto dir = test::fixtures_dir() / "models" / "kimi-k2-tiny";  // 8 heads, 12 experts
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  const auto prompt = golden_ids(*golden, "prompt.0");
  const std::string flags = "--ignore-eos --temperature 0.8 --max-tokens 8 --seed 5";
  const auto want = tokens_of(generate_json(dir, prompt, flags));
  ASSERT_EQ(want.size(), 8u);
  EXPECT_EQ(tokens_of(generate_json(dir, prompt, flags + " --tensor-parallel-size 8")), want);
  // The KV cache sharded by position over the ranks: the same tokens.
  EXPECT_EQ(tokens_of(generate_json(dir, prompt, flags + " --tensor-parallel-size 8 --kv-cache-sharding position")),
            want);

  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " generate --model " + dir.string() +
                                       " --prompt-ids 1,2,3 --tensor-parallel-size 3",
                                   &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("8 attention heads"), std::string::npos) << out;
  EXPECT_NE(out.find("3 ranks"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
