// The start-up self-check through the commands that load a model to run it (`generate`,
// `bench offline`; `serve` is in tests/server/self_check_serve_test.cpp), on the CPU backend made
// wrong by the test hook --test-perturb-op: the command refuses to run and names the op; with
// --skip-self-check it runs anyway; unperturbed on --device cpu the check is not needed.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

// `tessera --log-level info <args>`: the self-check's line is an info line.
std::string run(const std::string& args, int* rc) {
  std::string out;
  *rc = test::run_command(test::tessera_binary().string() + " --log-level info " + args, &out);
  return out;
}

TEST(SelfCheckCli, GenerateRefusesAWrongOpAndNamesIt) {
  int rc = 0;
  const std::string out = run("generate --model " + test::fixture_model_dir("kimi-k25-tiny-nvfp4") +
                                  " --prompt-ids 1,2,3 --max-tokens 2 --test-perturb-op mla_attention",
                              &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: self-check failed: op mla_attention (kernel: cpu reference ops"), std::string::npos)
      << out;
  EXPECT_NE(out.find("on layer 0, prefill of 16 tokens, weight language_model.model.layers.0.self_attn.kv_b_proj: "
                     "differs from the CPU reference: max relative error 1 at ["),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("run with --skip-self-check to start anyway"), std::string::npos) << out;
  EXPECT_EQ(out.find("generated"), std::string::npos) << "nothing may be generated: " << out;
}

TEST(SelfCheckCli, GenerateWithSkipSelfCheckRunsAnyway) {
  int rc = 0;
  const std::string out = run("generate --model " + test::fixture_model_dir("dsv3-tiny") +
                                  " --prompt-ids 1,2,3 --max-tokens 2 --test-perturb-op linear --skip-self-check",
                              &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("self-check: skipped (--skip-self-check)"), std::string::npos) << out;
  EXPECT_NE(out.find("generated 2 tokens"), std::string::npos) << out;
}

TEST(SelfCheckCli, RunsAndPassesOnAnUnperturbedWrappedBackend) {
  int rc = 0;
  const std::string out = run("generate --model " + test::fixture_model_dir("dsv3-tiny-fp8") +
                                  " --prompt-ids 1,2,3 --max-tokens 2 --test-perturb-op none",
                              &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("self-check: 42 op calls on layers 0 and 1 (prefill of 16 tokens, decode of 1) agree with the "
                     "CPU reference"),
            std::string::npos)
      << out;
}

TEST(SelfCheckCli, NotNeededOnTheCpuReference) {
  int rc = 0;
  const std::string out =
      run("generate --model " + test::fixture_model_dir("kimi-k2-tiny") + " --prompt-ids 1,2,3 --max-tokens 2", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("self-check: not needed on --device cpu"), std::string::npos) << out;
  EXPECT_EQ(out.find("op calls"), std::string::npos) << out;
}

TEST(SelfCheckCli, BenchOfflineRefusesAWrongOp) {
  int rc = 0;
  const std::string out = run("bench offline --model " + test::fixture_model_dir("dsv3-tiny") +
                                  " --num-requests 2 --input-len 4 --output-len 2 --test-perturb-op moe",
                              &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: self-check failed: op moe (kernel: cpu reference ops"), std::string::npos) << out;
  EXPECT_NE(out.find("on layer 1, prefill of 16 tokens, output experts"), std::string::npos) << out;
}

TEST(SelfCheckCli, UnknownPerturbedOp) {
  int rc = 0;
  const std::string out = run("generate --model " + test::fixture_model_dir("dsv3-tiny") +
                                  " --prompt-ids 1 --max-tokens 1 --test-perturb-op no_such_op",
                              &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--test-perturb-op 'no_such_op': not an op that can be perturbed"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
