// `tessera make-checkpoint` as users run it: bad flags fail with the flag named, the output does not
// depend on the thread count, and the written checkpoint runs through `tessera generate`.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string tokenizer_flag() {
  return " --tokenizer " + (test::fixtures_dir() / "tokenizers" / "deepseek-v3").string();
}
const std::string kTiny =
    " --layers 2 --experts 8 --hidden 256 --vocab 1024 --moe-intermediate 128 --intermediate 512 --heads 4";

void expect_fails_naming(const std::string& args, const std::string& flag) {
  SCOPED_TRACE(args);
  int rc = 0;
  const std::string out = test::tessera("make-checkpoint " + args, &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(flag), std::string::npos) << "the message does not name " << flag << ":\n" << out;
}

TEST(MakeCheckpointCli, BadFlagsFailNamingTheFlag) {
  const fs::path dir = test::make_temp_dir("tessera-mkckpt-cli");
  const std::string out = " --out " + (dir / "new").string() + tokenizer_flag();
  expect_fails_naming("--like llama-3" + kTiny + out, "--like");
  expect_fails_naming("--like deepseek-v3-fp8 --layers 2 --experts 0 --hidden 256 --vocab 1024" + out, "--experts");
  expect_fails_naming("--like deepseek-v3-fp8 --layers 0 --experts 8 --hidden 256 --vocab 1024" + out, "--layers");
  expect_fails_naming("--like kimi-k2.5-nvfp4 --layers 2 --experts 8 --hidden 200 --vocab 1024" + out, "--hidden");
  expect_fails_naming("--like deepseek-v3-bf16" + kTiny + " --out " + (dir / "new").string() + " --tokenizer " +
                          (dir / "no-such-tokenizer").string(),
                      "no-such-tokenizer");
  expect_fails_naming("--like deepseek-v3-bf16" + kTiny + " --first-dense 3" + out, "--first-dense");
  expect_fails_naming("--like deepseek-v3-bf16" + kTiny + " --first-dense -1" + out, "--first-dense");
  EXPECT_FALSE(fs::exists(dir / "new")) << "a refused run must not create --out";

  fs::create_directories(dir / "full");
  test::write_file(dir / "full" / "notes.txt", "user data");
  expect_fails_naming("--like deepseek-v3-bf16" + kTiny + " --out " + (dir / "full").string() + tokenizer_flag(),
                      "--out");
  // --force writes into it and keeps the user's other files.
  int rc = 0;
  const std::string forced = test::tessera("make-checkpoint --like deepseek-v3-bf16" + kTiny + " --force --out " +
                                               (dir / "full").string() + tokenizer_flag(),
                                           &rc);
  EXPECT_EQ(rc, 0) << forced;
  EXPECT_TRUE(fs::exists(dir / "full" / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / "full" / "model.safetensors.index.json"));
  fs::remove_all(dir);
}

// --first-dense sets first_k_dense_replace: a DeepSeek-V3 layout with Kimi-K2.5's single dense layer.
TEST(MakeCheckpointCli, FirstDenseSetsTheLeadingDenseLayers) {
  const fs::path dir = test::make_temp_dir("tessera-mkckpt-cli");
  int rc = 0;
  const std::string out = test::tessera(
      "make-checkpoint --like deepseek-v3-bf16 --layers 3 --experts 8 --hidden 256 "
      "--vocab 1024 --moe-intermediate 128 --intermediate 512 --heads 4 "
      "--first-dense 0 --out " +
          dir.string() + tokenizer_flag(),
      &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string config = test::read_file(dir / "config.json");
  EXPECT_NE(config.find("\"first_k_dense_replace\": 0"), std::string::npos) << config;
  const std::string index = test::read_file(dir / "model.safetensors.index.json");
  // With no dense layer, layer 0 has routed experts and no dense MLP.
  EXPECT_NE(index.find("model.layers.0.mlp.experts.0.gate_proj.weight"), std::string::npos);
  EXPECT_EQ(index.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos);
  fs::remove_all(dir);
}

TEST(MakeCheckpointCli, ThreadCountDoesNotChangeTheBytesAndTheModelGenerates) {
  const fs::path dir = test::make_temp_dir("tessera-mkckpt-cli");
  const std::string bin = test::tessera_binary().string() + " --log-level warn make-checkpoint --like kimi-k2.5-nvfp4" +
                          kTiny + " --seed 5" + tokenizer_flag();
  std::string out;
  ASSERT_EQ(test::run_command("TESSERA_NUM_THREADS=1 " + bin + " --out " + (dir / "t1").string(), &out), 0) << out;
  ASSERT_EQ(test::run_command("TESSERA_NUM_THREADS=3 " + bin + " --out " + (dir / "t3").string(), &out), 0) << out;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "t1")) {
    ++files;
    EXPECT_EQ(test::read_file(e.path()), test::read_file(dir / "t3" / e.path().filename()))
        << e.path().filename() << " depends on the thread count";
  }
  // config, hf_quant_config, index, tokenizer.json, tokenizer_config.json and at least two shards
  EXPECT_GE(files, 7u);
  EXPECT_TRUE(fs::exists(dir / "t1" / "tokenizer.json"));
  EXPECT_EQ(test::read_file(dir / "t1" / "tokenizer_config.json"),
            test::read_file(test::fixtures_dir() / "tokenizers" / "deepseek-v3" / "tokenizer_config.json"));

  int rc = 0;
  const std::string gen = test::tessera(
      "generate --json --model " + (dir / "t1").string() + " --prompt-ids 3,50,700,12 --max-tokens 6 --ignore-eos",
      &rc);
  EXPECT_EQ(rc, 0) << gen;
  EXPECT_NE(gen.find("\"tokens\""), std::string::npos) << gen;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
