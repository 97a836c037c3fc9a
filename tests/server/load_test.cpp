// Load: a few hundred streamed requests, 64 at a time, every fifth client disconnecting after its
// first content chunk. Afterwards every admitted request has completed or been aborted, no KV page
// is still referenced, nothing is queued or in flight, and /health is green. Bounded: 320
// requests of at most 24 tokens on the small demo model, loopback only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "http_helpers.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

TEST(ServerLoad, SixtyFourStreamsWithDisconnects) {
  ServerProcess srv({"--max-num-seqs", "64"});
  // Under AddressSanitizer the server is ~8x slower (320 requests took 231 s of the CI's budget);
  // 50 still run at once and drop 10 of them mid-stream.
#if defined(TESSERA_TEST_ASAN)
  constexpr int kRequests = 50;
#else
  constexpr int kRequests = 320;
#endif
  constexpr int kConcurrency = 64;
  std::atomic<int> next{0}, completed{0}, disconnected{0}, failed{0};
  std::vector<std::thread> workers;
  const auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < kConcurrency; ++w) {
    workers.emplace_back([&] {
      httplib::Client c("127.0.0.1", srv.port());
      c.set_read_timeout(60, 0);
      for (int i = next++; i < kRequests; i = next++) {
        const bool drop = i % 5 == 0;
        httplib::Request req;
        req.method = "POST";
        req.path = i % 2 ? "/v1/chat/completions" : "/v1/completions";
        const std::string max = std::to_string(8 + i % 17);
        req.body = i % 2 ? R"({"messages":[{"role":"user","content":"load )" + std::to_string(i) +
                               R"("}],"stream":true,"max_tokens":)" + max + "}"
                         : R"({"prompt":"load )" + std::to_string(i) + R"(","stream":true,"max_tokens":)" + max + "}";
        req.set_header("Content-Type", "application/json");
        std::string body;
        int chunks = 0;
        req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
          body.append(data, len);
          ++chunks;
          return !(drop && chunks >= 2);  // close the connection mid-stream
        };
        auto r = c.send(req);
        if (drop) {
          // (No Client::stop() here: the connection is already closed, and stop() would close the
          // stale descriptor number, which another thread's new connection may have reused.)
          ++disconnected;
          continue;
        }
        bool done = false;
        if (r && r->status == 200 && (sse_events(body, &done), done)) {
          ++completed;
        } else {
          ++failed;
          std::printf("request %d failed: %s status %d body %s\n", i,
                      r ? "response" : httplib::to_string(r.error()).c_str(), r ? r->status : 0,
                      body.substr(0, 200).c_str());
        }
      }
    });
  }
  // /health and /metrics keep answering quickly while every stream is busy.
  std::atomic<bool> running{true};
  std::atomic<int> health_ok{0}, health_bad{0};
  std::thread prober([&] {
    httplib::Client h("127.0.0.1", srv.port());
    h.set_read_timeout(2, 0);
    while (running) {
      auto r = h.Get("/health");
      (r && r->status == 200 ? health_ok : health_bad)++;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& t : workers) t.join();
  running = false;
  prober.join();
  EXPECT_GT(health_ok.load(), 0);
  EXPECT_EQ(health_bad.load(), 0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(completed + disconnected, kRequests);
  EXPECT_EQ(failed.load(), 0) << srv.log().substr(0, 6000);
  EXPECT_EQ(disconnected.load(), kRequests / 5);

  // Aborted requests are cleaned up within a few engine steps: the server drains to idle.
  httplib::Client c("127.0.0.1", srv.port());
  bool idle = false;
  for (int i = 0; i < 400 && !idle; ++i) {
    idle = metric(c, "tessera_requests_in_flight") == 0 && metric(c, "tessera_requests_running") == 0 &&
           metric(c, "tessera_requests_waiting") == 0 && metric(c, "tessera_kv_pages_used") == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(idle) << c.Get("/metrics")->body;
  EXPECT_EQ(metric(c, "tessera_requests_finished_total"), kRequests);
  EXPECT_GE(metric(c, "tessera_requests_aborted_total"), 1);
  // Latency histograms and token counters saw the traffic.
  EXPECT_GE(metric(c, "tessera_time_to_first_token_seconds_count"), kRequests - kRequests / 5);
  EXPECT_GT(metric(c, "tessera_inter_token_latency_seconds_count"), 0);
  EXPECT_GT(metric(c, "tessera_generation_tokens_total"), 0);
  EXPECT_GT(metric(c, "tessera_prompt_tokens_total"), 0);
  EXPECT_GE(metric(c, "tessera_request_errors_total{status=\"499\"}"), 1);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  // The server still answers normally.
  auto r = post_json(c, "/v1/completions", R"({"prompt":"after","max_tokens":4})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::printf("load: %d requests in %.2f s (%d disconnected)\n", kRequests, secs, disconnected.load());
}

}  // namespace
}  // namespace tessera::test
