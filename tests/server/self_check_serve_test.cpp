// `tessera serve` and the start-up self-check, on the demo model and the CPU backend made wrong by
// the test hook --test-perturb-op: the server refuses to start (it answers /health "loading" while
// the weights load and check, then exits 1 without ever being ready) and says which op disagreed;
// unperturbed, the check runs and passes before the server is ready; --skip-self-check starts a
// wrong backend anyway.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "http_helpers.h"
#include "server_process.h"

namespace tessera::test {
namespace {

TEST(ServeSelfCheck, RefusesToStartWhenAnOpDisagrees) {
  std::string log;
  try {
    ServerProcess srv({"--test-perturb-op", "rms_norm_linear"});
    FAIL() << "the server started with a wrong op:\n" << srv.log();
  } catch (const std::runtime_error& e) {
    log = e.what();
  }
  EXPECT_NE(log.find("exited while loading the model"), std::string::npos) << log;
  EXPECT_NE(log.find("error: self-check failed: op rms_norm_linear (kernel: cpu reference ops"), std::string::npos)
      << log;
  EXPECT_NE(log.find("on layer 0, prefill of 16 tokens, weight model.layers.0.self_attn.q_b_proj: differs from the "
                     "CPU reference: max relative error 1 at ["),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--skip-self-check to start anyway"), std::string::npos) << log;
  EXPECT_EQ(log.find("tessera serve: ready"), std::string::npos) << log;
}

TEST(ServeSelfCheck, StartsWhenEveryOpAgrees) {
  ServerProcess srv({"--test-perturb-op", "none"});
  const std::string log = srv.log();
  EXPECT_NE(log.find("self-check: "), std::string::npos) << log;
  EXPECT_NE(log.find("agree with the CPU reference"), std::string::npos) << log;
  // Checked before the server is ready.
  EXPECT_LT(log.find("agree with the CPU reference"), log.find("tessera serve: ready")) << log;
  httplib::Client c("127.0.0.1", srv.port());
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(srv.terminate(30), 0) << srv.log();
  srv.forget();
}

TEST(ServeSelfCheck, SkipSelfCheckStartsAnyway) {
  ServerProcess srv({"--test-perturb-op", "rms_norm_linear", "--skip-self-check"});
  EXPECT_NE(srv.log().find("self-check: skipped (--skip-self-check)"), std::string::npos) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_json(c, "/v1/completions", R"({"prompt":"abc","max_tokens":4,"temperature":0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(srv.terminate(30), 0) << srv.log();
  srv.forget();
}

}  // namespace
}  // namespace tessera::test
