// `tessera serve --tensor-parallel-size 2` (CPU ranks as threads) answers as one rank does: the same
// greedy completion from the demo model (2 attention heads).
#include <gtest/gtest.h>

#include "http_helpers.h"
#include "server_process.h"

namespace tessera::test {
namespace {

std::string greedy_text(ServerProcess& srv) {
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  auto r = post_json(c, "/v1/completions", R"({"prompt":"The capital of France","max_tokens":12,"temperature":0})");
  EXPECT_TRUE(r) << srv.log();
  if (!r) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  return Json::parse(r->body)["choices"][0]["text"].get<std::string>();
}

TEST(ServerTensorParallel, TwoRanksAnswerAsOne) {
  std::string one, two;
  {
    ServerProcess srv;
    one = greedy_text(srv);
  }
  {
    ServerProcess srv({"--tensor-parallel-size", "2"});
    two = greedy_text(srv);
    EXPECT_NE(srv.log().find("2 ranks (threads of this process)"), std::string::npos) << srv.log();
  }
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(two, one);
}

}  // namespace
}  // namespace tessera::test
