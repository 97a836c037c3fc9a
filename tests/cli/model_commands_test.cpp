// The model subcommands end to end through the built binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/golden_util.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(Cli, LogitsWritesTheGoldenLogits) {
  const auto dir = test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4";
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  auto prompt = golden->tensor("prompt.2");
  std::string ids;
  for (int64_t i = 0; i < prompt.numel(); ++i) ids += (i ? "," : "") + std::to_string(prompt.data<int32_t>()[i]);
  const auto out_dir = test::make_temp_dir("tessera-cli");
  int rc = 0;
  // Golden logits were computed without KV quantization; this fixture's FP8 KV hint would give fp8.
  std::string out = tessera("logits --model " + dir.string() + " --kv-cache-dtype fp32 --prompt-ids " + ids +
                                " --out " + (out_dir / "l.safetensors").string(),
                            &rc);
  ASSERT_EQ(rc, 0) << out;
  auto written = io::SafetensorsFile::open(out_dir / "l.safetensors");
  auto logits = written->tensor("logits");
  ASSERT_EQ(logits.shape(), (core::Shape{prompt.numel(), 1024}));
  auto ref = golden->tensor("logits.2");
  std::vector<float> a(logits.data<float>(), logits.data<float>() + logits.numel()),
      b(ref.data<float>(), ref.data<float>() + ref.numel());
  EXPECT_LE(test::rel_rms(a, b), 1e-4);
  std::filesystem::remove_all(out_dir);
}

TEST(Cli, GenerateJsonReproducesTheGoldenGreedyTokens) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  auto prompt = golden->tensor("prompt.1");
  auto greedy = golden->tensor("greedy.1");
  auto margin = golden->tensor("greedy_margin.1");
  std::string ids;
  for (int64_t i = 0; i < prompt.numel(); ++i) ids += (i ? "," : "") + std::to_string(prompt.data<int32_t>()[i]);
  int rc = 0;
  std::string out =
      tessera("generate --json --ignore-eos --max-tokens 16 --model " + dir.string() + " --prompt-ids " + ids, &rc);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  ASSERT_EQ(j["tokens"].size(), 16u);
  EXPECT_EQ(j["finish_reason"], "length");
  for (int64_t k = 0; k < 16 && margin.data<float>()[k] > 1e-3f; ++k)
    EXPECT_EQ(j["tokens"][k].get<int32_t>(), greedy.data<int32_t>()[k]) << "step " << k;
}

TEST(Cli, BadArgumentsAreErrorsNotCrashes) {
  const auto dir = test::fixtures_dir() / "models" / "dsv3-tiny";
  int rc = 0;
  std::string out = tessera("generate --model " + dir.string() + " --prompt-ids 1,x,3", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--prompt-ids"), std::string::npos) << out;
  out = tessera("generate --model " + dir.string() + " --prompt-ids 1,99999", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("99999"), std::string::npos) << out;
  out = tessera("generate --model " + dir.string() + " --prompt-ids 1 --max-tokens 5000", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("max_position_embeddings"), std::string::npos) << out;
  out = tessera("inspect --model /nonexistent/dir", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("/nonexistent/dir"), std::string::npos) << out;
  out =
      tessera("inspect --model " + dir.string() + " --kv-cache-dtype bf16", &rc);  // the cpu backend has no bf16 cache
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--kv-cache-dtype"), std::string::npos) << out;
}

TEST(Cli, InspectReportsTheKimiK25Trap) {
  int rc = 0;
  std::string out =
      tessera("inspect --json --model " + (test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4").string(), &rc);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["architecture"], "KimiK25ForConditionalGeneration");
  EXPECT_EQ(j["linear_formats"]["routed experts"]["nvfp4-g16"], 2 * 12 * 3);
  EXPECT_EQ(j["linear_formats"]["attention"]["BF16"], 3 * 5);
  EXPECT_NE(j["kv_cache"]["reason"].get<std::string>().find("kv_cache_scheme"), std::string::npos);
  EXPECT_EQ(j["kv_cache"]["layers_with_k_scale"], 3);
  EXPECT_EQ(j["skipped_tensors"], 4);
}

}  // namespace
}  // namespace tessera
