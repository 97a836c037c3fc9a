// The life of `tessera serve` around its requests: answering while the model loads (liveness 200,
// readiness 503 with the progress, every /v1 route 503 with Retry-After), turning ready, exiting
// at once on SIGTERM during the load, exiting 1 when the load fails or the engine thread dies, a
// non-streamed request cut by shutdown answered 503 (not 200 + error), and JSON log lines.
#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "http_helpers.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

const std::string kChat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4})";

// A file that does not exist yet; the server's load waits for it (--test-load-gate).
std::filesystem::path gate_path() { return make_temp_dir("tessera-load-gate") / "open"; }

TEST(ServerLifecycle, AnswersWhileLoadingThenTurnsReady) {
  const auto gate = gate_path();
  ServerProcess srv({"--test-load-gate", gate.string(), "--api-key", "k"}, /*wait_ready=*/false);
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(30, 0);
  const httplib::Headers key{{"Authorization", "Bearer k"}};

  // Readiness: 503 "loading" with the progress. The total is known once the load has begun.
  Json health;
  for (int i = 0; i < 1000; ++i) {
    auto r = c.Get("/health");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 503) << r->body;
    health = Json::parse(r->body);
    if (health["progress"]["bytes_total"].get<uint64_t>() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(health["status"], "loading") << health.dump();
  const Json& p = health["progress"];
  EXPECT_GT(p["bytes_total"].get<uint64_t>(), 0u) << health.dump();
  EXPECT_LT(p["bytes_done"].get<uint64_t>(), p["bytes_total"].get<uint64_t>()) << health.dump();
  EXPECT_GE(p["fraction"].get<double>(), 0.0);
  EXPECT_LT(p["fraction"].get<double>(), 1.0);
  EXPECT_GE(p["seconds"].get<double>(), 0.0);
  auto readyz = c.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 503);
  EXPECT_EQ(Json::parse(readyz->body)["status"], "loading");

  // Liveness: the process is up.
  auto live = c.Get("/livez");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  EXPECT_EQ(Json::parse(live->body)["state"], "loading");

  // Every /v1 route: 503 with an OpenAI error saying so, and when to retry.
  auto loading_503 = [](const httplib::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    const Json e = Json::parse(r->body);
    EXPECT_EQ(e["error"]["code"], "service_unavailable");
    EXPECT_EQ(e["error"]["type"], "service_unavailable_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("loading"), std::string::npos) << r->body;
    ASSERT_EQ(r->get_header_value_count("Retry-After"), 1u);
    EXPECT_GE(std::stoi(r->get_header_value("Retry-After")), 1);
  };
  loading_503(post_json(c, "/v1/chat/completions", kChat, "k"));
  loading_503(post_json(c, "/v1/completions", R"({"prompt":"x","max_tokens":2})", "k"));
  loading_503(c.Get("/v1/models", key));
  // The API key is still checked first.
  auto denied = post_json(c, "/v1/chat/completions", kChat, "wrong");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  // Metrics answer, unhealthy and not loaded.
  EXPECT_EQ(metric(c, "tessera_healthy"), 0);
  EXPECT_LT(metric(c, "tessera_model_load_fraction"), 1);

  write_file(gate, "");
  srv.wait_ready();
  auto ok = c.Get("/health");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(Json::parse(ok->body), Json::parse(R"({"status":"ok"})"));
  auto readyz2 = c.Get("/readyz");
  ASSERT_TRUE(readyz2);
  EXPECT_EQ(readyz2->status, 200);
  EXPECT_EQ(Json::parse(c.Get("/livez")->body)["state"], "ready");
  auto chat = post_json(c, "/v1/chat/completions", kChat, "k");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(metric(c, "tessera_healthy"), 1);
  EXPECT_EQ(metric(c, "tessera_model_load_fraction"), 1);
  EXPECT_EQ(srv.terminate(60), 0) << srv.log();
}

TEST(ServerLifecycle, SigtermDuringTheLoadExitsAtOnce) {
  // The gate never opens: without the prompt exit the process would wait for the load forever.
  ServerProcess srv({"--test-load-gate", gate_path().string()}, /*wait_ready=*/false);
  httplib::Client c("127.0.0.1", srv.port());
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(srv.terminate(30), 0) << srv.log();
  EXPECT_NE(srv.log().find("stopped while the model was still loading"), std::string::npos) << srv.log();
}

TEST(ServerLifecycle, LoadFailureExitsNonZeroWithTheMessage) {
  ServerProcess srv({"--test-fail-load"}, /*wait_ready=*/false);
  EXPECT_EQ(srv.wait_exit(60), 1) << srv.log();
  EXPECT_NE(srv.log().find("error: injected load failure (--test-fail-load)"), std::string::npos) << srv.log();
  EXPECT_EQ(srv.log().find("tessera serve: ready"), std::string::npos) << srv.log();
}

TEST(ServerLifecycle, EngineThreadDeathFailsTheRequestAndExitsNonZero) {
  ServerProcess srv({"--test-kill-engine-token", "4242"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(30, 0);
  auto ok = post_json(c, "/v1/completions", R"({"prompt":[10,11],"max_tokens":2})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto bad = post_json(c, "/v1/completions", R"({"prompt":[10,4242],"max_tokens":2})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 500) << bad->body;
  EXPECT_EQ(Json::parse(bad->body)["error"]["code"], "internal_error");
  // No one sends SIGTERM: the server notices, stops serving and exits 1 on its own; it is told by
  // the engine itself (its listener), not only through the request that saw the failure.
  EXPECT_EQ(srv.wait_exit(60), 1) << srv.log();
  EXPECT_NE(srv.log().find("holds the test loop-fault token 4242): shutting down (exit status 1)"), std::string::npos)
      << srv.log();
}

TEST(ServerLifecycle, NonStreamedRequestCutByShutdownGets503) {
  ServerProcess srv({"--shutdown-grace", "0.3"});
  int status = 0;
  std::string body, retry_after;
  std::thread client([&] {
    httplib::Client h("127.0.0.1", srv.port());
    h.set_read_timeout(60, 0);
    auto r = post_json(h, "/v1/completions", R"({"prompt":"a","max_tokens":3500,"ignore_eos":true})");
    if (r) status = r->status, body = r->body, retry_after = r->get_header_value("Retry-After");
  });
  httplib::Client c("127.0.0.1", srv.port());
  for (int i = 0; i < 1000 && metric(c, "tessera_requests_running") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(metric(c, "tessera_requests_running"), 1);
  // Past the second after which the server used to commit a 200 and send whitespace.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(srv.terminate(30), 0) << srv.log();
  client.join();
  EXPECT_EQ(status, 503) << body;
  EXPECT_EQ(retry_after, "1");
  const Json e = Json::parse(body);
  EXPECT_EQ(e["error"]["code"], "service_unavailable") << body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("shut down"), std::string::npos) << body;
}

TEST(ServerLifecycle, LongNonStreamedAnswerIsAnOrdinaryJsonResponse) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  auto r = post_json(c, "/v1/completions", R"({"prompt":"a","max_tokens":400,"ignore_eos":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_FALSE(r->has_header("Transfer-Encoding")) << r->get_header_value("Transfer-Encoding");
  ASSERT_FALSE(r->body.empty());
  EXPECT_EQ(r->body[0], '{');
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 400);
}

TEST(ServerLifecycle, JsonLogLinesParse) {
  ServerProcess srv({"--log-format", "json", "--log-level", "debug"});
  httplib::Client c("127.0.0.1", srv.port());
  auto r = post_json(c, "/v1/chat/completions", kChat);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(srv.terminate(60), 0) << srv.log();
  std::istringstream in(srv.log());
  int records = 0;
  bool saw_signal = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tessera serve: ", 0) == 0) continue;  // the stdout lines (listening, ready)
    Json j;
    ASSERT_NO_THROW(j = Json::parse(line)) << line;
    EXPECT_TRUE(j.contains("time") && j.contains("level") && j.contains("message") && j.contains("logger")) << line;
    saw_signal = saw_signal || j["message"].get<std::string>().find("received signal") != std::string::npos;
    ++records;
  }
  EXPECT_GT(records, 3) << srv.log();
  EXPECT_TRUE(saw_signal) << srv.log();
}

}  // namespace
}  // namespace tessera::test
