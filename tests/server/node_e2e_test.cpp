// Runs the Node end-to-end suites against a server on a free loopback port: the OpenAI and
// Anthropic SDKs (tests/server/e2e/openai_sdk.mjs, anthropic_sdk.mjs) and the client libraries
// LangChain and the Vercel AI SDK (client_libs.mjs). Skipped when node or the npm packages
// (scripts/setup.sh) are missing.
#include <gtest/gtest.h>

#include <filesystem>

#include "server_process.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

TEST(ServerNodeSdk, OpenAiSdkEndToEnd) {
  const std::filesystem::path npm = TESSERA_SOURCE_DIR "/third_party/npm";
  if (run_command("node --version", nullptr) != 0)
    TESSERA_SKIP_UNLESS_REQUIRED("node is not installed (scripts/setup.sh)");
  for (const char* pkg : {"openai", "zod"})  // zod: the structured-output helpers
    if (!std::filesystem::exists(npm / "node_modules" / pkg / "package.json"))
      TESSERA_SKIP_UNLESS_REQUIRED("npm package '" << pkg << "' missing in " << npm << " (run scripts/setup.sh)");
  ServerProcess srv({"--api-key", "e2e-key"});
  std::string out;
  // The suite takes ~15 s in a release build, ~90 s under AddressSanitizer alone and over 120 s beside
  // other tests on a 2-core CI machine.
  const int rc =
      run_command("TESSERA_URL=" + srv.url() + "/v1 TESSERA_API_KEY=e2e-key TESSERA_NPM_DIR=" + npm.string() +
                      " timeout 400 node " TESSERA_SOURCE_DIR "/tests/server/e2e/openai_sdk.mjs",
                  &out);
  std::printf("%s\n", out.c_str());
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << srv.log().substr(0, 4000);
}

TEST(ServerNodeSdk, AnthropicSdkEndToEnd) {
  const std::filesystem::path npm = TESSERA_SOURCE_DIR "/third_party/npm";
  if (run_command("node --version", nullptr) != 0)
    TESSERA_SKIP_UNLESS_REQUIRED("node is not installed (scripts/setup.sh)");
  if (!std::filesystem::exists(npm / "node_modules" / "@anthropic-ai" / "sdk" / "package.json"))
    TESSERA_SKIP_UNLESS_REQUIRED("npm package '@anthropic-ai/sdk' missing in " << npm << " (run scripts/setup.sh)");
  ServerProcess srv({"--api-key", "e2e-key"});
  std::string out;
  // The SDK takes the server's root (it appends /v1/messages) and sends the key as x-api-key.
  const int rc = run_command("TESSERA_URL=" + srv.url() + " TESSERA_API_KEY=e2e-key TESSERA_NPM_DIR=" + npm.string() +
                                 " timeout 300 node " TESSERA_SOURCE_DIR "/tests/server/e2e/anthropic_sdk.mjs",
                             &out);
  std::printf("%s\n", out.c_str());
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << srv.log().substr(0, 4000);
}

TEST(ServerNodeSdk, LangChainAndAiSdkEndToEnd) {
  const std::filesystem::path npm = TESSERA_SOURCE_DIR "/third_party/npm";
  if (run_command("node --version", nullptr) != 0)
    TESSERA_SKIP_UNLESS_REQUIRED("node is not installed (scripts/setup.sh)");
  for (const char* pkg : {"@langchain/openai", "ai", "@ai-sdk/openai-compatible", "zod"})
    if (!std::filesystem::exists(npm / "node_modules" / pkg / "package.json"))
      TESSERA_SKIP_UNLESS_REQUIRED("npm package '" << pkg << "' missing in " << npm << " (run scripts/setup.sh)");
  ServerProcess srv({"--api-key", "e2e-key"});
  std::string out;
  const int rc =
      run_command("TESSERA_URL=" + srv.url() + "/v1 TESSERA_API_KEY=e2e-key TESSERA_NPM_DIR=" + npm.string() +
                      " timeout 300 node " TESSERA_SOURCE_DIR "/tests/server/e2e/client_libs.mjs",
                  &out);
  std::printf("%s\n", out.c_str());
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << srv.log().substr(0, 4000);
}

}  // namespace
}  // namespace tessera::test
