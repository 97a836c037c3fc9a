// `tessera serve --device cuda`: the same server on the GPU backend answers chat and streamed
// completions (greedy and seeded top-p, which the device sampler draws), repeats a seeded request
// exactly, and shuts down cleanly. Skips itself without a GPU (or a CUDA build).
#include <gtest/gtest.h>

#include "http_helpers.h"
#include "server_process.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif
#include "support/require_gpu.h"

namespace tessera::test {
namespace {

TEST(ServerCuda, ChatAndStreamedCompletionsOnTheGpu) {
#ifndef TESSERA_HAVE_CUDA
  TESSERA_SKIP_UNLESS_REQUIRED("built without the CUDA backend");
#else
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  ServerProcess srv({"--device", "cuda"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120, 0);
  const std::string chat =
      R"({"messages":[{"role":"user","content":"Hello on the GPU"}],"max_tokens":12,"temperature":0})";
  auto a = post_json(c, "/v1/chat/completions", chat), b = post_json(c, "/v1/chat/completions", chat);
  ASSERT_TRUE(a && b) << srv.log();
  ASSERT_EQ(a->status, 200) << a->body << srv.log();
  const Json ja = Json::parse(a->body), jb = Json::parse(b->body);
  EXPECT_EQ(ja["usage"]["completion_tokens"], 12) << a->body;
  EXPECT_EQ(ja["choices"][0]["finish_reason"], "length") << a->body;
  EXPECT_EQ(ja["choices"][0]["message"]["content"], jb["choices"][0]["message"]["content"]) << "greedy repeats";

  // Seeded top-p: streamed and non-streamed give the same text.
  const std::string body = R"({"prompt":"abc","max_tokens":8,"temperature":0.8,"top_p":0.9,"seed":11)";
  auto plain = post_json(c, "/v1/completions", body + "}");
  auto streamed = post_json(c, "/v1/completions", body + R"(,"stream":true})");
  ASSERT_TRUE(plain && streamed);
  ASSERT_EQ(plain->status, 200) << plain->body;
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  bool done = false;
  std::string text;
  for (const auto& ev : sse_events(streamed->body, &done)) text += ev["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(done) << streamed->body;
  EXPECT_EQ(text, Json::parse(plain->body)["choices"][0]["text"].get<std::string>());
  EXPECT_FALSE(text.empty());

  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(srv.terminate(60), 0) << srv.log();
  srv.forget();
  EXPECT_NE(srv.log().find("backend: cuda"), std::string::npos) << srv.log();
  // The start-up self-check ran on the GPU and passed before the server listened.
  EXPECT_NE(srv.log().find("agree with the CPU reference"), std::string::npos) << srv.log();
#endif
}

}  // namespace
}  // namespace tessera::test
