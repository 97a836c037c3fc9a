// `tessera serve --warmup-tokens N` on the demo model and the CPU backend (where the warm-up is off
// by default): the prompt runs after the self-check and before the server is ready, and a warm-up
// whose step fails ends start-up with exit status 1, naming its length and the flags to change.
#include <gtest/gtest.h>

#include <string>

#include "http_helpers.h"
#include "server_process.h"

namespace tessera::test {
namespace {

TEST(ServeWarmup, RunsBeforeTheServerIsReady) {
  ServerProcess srv({"--warmup-tokens", "40"});
  const std::string log = srv.log();
  const size_t warm = log.find("warm-up: a 40-token prompt in ");
  ASSERT_NE(warm, std::string::npos) << log;
  EXPECT_LT(warm, log.find("tessera serve: ready")) << log;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_json(c, "/v1/completions", R"({"prompt":"abc","max_tokens":4,"temperature":0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(srv.terminate(30), 0) << srv.log();
  srv.forget();
}

TEST(ServeWarmup, AFailedWarmUpExitsNonZeroNamingTheFlags) {
  // The engine thread dies on the warm-up prompt: its first id is 13 ((0 * 7919 + 13) % vocab).
  ServerProcess srv({"--warmup-tokens", "20", "--test-kill-engine-token", "13"}, /*wait_ready=*/false);
  EXPECT_EQ(srv.wait_exit(60), 1) << srv.log();
  const std::string log = srv.log();
  EXPECT_NE(log.find("error: warm-up: a prompt of 20 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("--warmup-tokens 0"), std::string::npos) << log;
  EXPECT_EQ(log.find("tessera serve: ready"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::test
