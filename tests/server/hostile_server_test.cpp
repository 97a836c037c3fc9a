// Hostile requests against the real `tessera serve` (demo model), over raw sockets: every framing
// error answered at once with its status (400/411/413/431/501/505), oversized bodies refused while
// they arrive without the server's memory following them, JSON built to crash or stall the parser
// refused with a bounded error, response amplification refused up front, and after each attack the
// server is still there and answers as before. One server for the whole suite (start-up is the
// expensive part); the flood, deadline and signal cases are in hostile_flood_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>

#include "hostile_helpers.h"
#include "http_helpers.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

// Much longer than any answer may take: a request answered only at a deadline would show.
constexpr double kStall = 30;
constexpr size_t kMaxErrorBody = 1500;

class HostileServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#if defined(TESSERA_TEST_ASAN)
    // AddressSanitizer keeps freed blocks (up to 256 MiB) in quarantine to catch use after free,
    // so the server's resident set would show the refused bodies it has already freed. The RSS
    // bound below is about what the server keeps, so its child runs without the quarantine.
    const char* outer = std::getenv("ASAN_OPTIONS");
    const std::string saved = outer ? outer : "";
    ::setenv("ASAN_OPTIONS", (saved + (saved.empty() ? "" : ":") + "quarantine_size_mb=0").c_str(), 1);
#endif
    srv_ = new ServerProcess({"--http-header-timeout", std::to_string(kStall), "--http-body-timeout",
                              std::to_string(kStall), "--max-n", "16"});
#if defined(TESSERA_TEST_ASAN)
    if (outer)
      ::setenv("ASAN_OPTIONS", saved.c_str(), 1);
    else
      ::unsetenv("ASAN_OPTIONS");
#endif
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  static int port() { return srv_->port(); }

  // One raw request on a fresh connection; with `wait_close` (a framing error: the server closes
  // the connection after answering) also waits for the close.
  static RawResponse exchange(const std::string& bytes, bool wait_close = true, double timeout_s = 20) {
    const int fd = connect_to(port());
    EXPECT_GE(fd, 0);
    if (fd < 0) return {};
    send_all(fd, bytes);
    RawResponse r = read_response(fd, timeout_s, wait_close);
    ::close(fd);
    return r;
  }

  // The server still answers: /health 200 and a tiny completion.
  static void expect_alive(const std::string& after) {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(60, 0);
    auto h = c.Get("/health");
    ASSERT_TRUE(h) << "the server is gone after " << after << "\n" << srv_->log();
    EXPECT_EQ(h->status, 200) << after;
    auto r = post_json(c, "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
    ASSERT_TRUE(r) << after;
    EXPECT_EQ(r->status, 200) << after << ": " << r->body;
  }

  // A refused request: the status, an OpenAI error object of bounded size naming the status.
  static void expect_error(const RawResponse& r, int status, const std::string& what) {
    EXPECT_EQ(r.status, status) << what << "\n" << r.head << excerpt_of(r.body);
    EXPECT_LT(r.body.size(), kMaxErrorBody) << what;
    const auto err = error_of(r.body);
    ASSERT_FALSE(err.is_null()) << what << ": not an OpenAI error: " << excerpt_of(r.body);
    const std::map<int, std::string> codes = {
        {400, "invalid_request"},   {404, "model_not_found"},   {408, "request_timeout"},
        {411, "length_required"},   {413, "request_too_large"}, {414, "uri_too_long"},
        {431, "headers_too_large"}, {501, "not_implemented"},   {505, "http_version_not_supported"}};
    ASSERT_TRUE(codes.count(status)) << what;
    EXPECT_EQ(err["code"], codes.at(status)) << what;
    EXPECT_TRUE(err["message"].is_string() && !err["message"].get<std::string>().empty()) << what;
  }
  static std::string excerpt_of(const std::string& s) { return s.size() > 300 ? s.substr(0, 300) + "..." : s; }

  static ServerProcess* srv_;
};
ServerProcess* HostileServer::srv_ = nullptr;

TEST_F(HostileServer, FramingErrorsAreAnsweredAtOnceWithTheirStatus) {
  const std::string post = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
  std::string many_headers = post;
  for (int i = 0; i < 150; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"POST without a body length", post + "\r\n", 411},
      {"POST /v1/completions without a body length", "POST /v1/completions HTTP/1.1\r\n\r\n", 411},
      {"Content-Length: -1", post + "Content-Length: -1\r\n\r\n", 400},
      {"Content-Length 2^64", post + "Content-Length: 18446744073709551616\r\n\r\n", 413},
      {"Content-Length of 30 digits", post + "Content-Length: 999999999999999999999999999999\r\n\r\n", 413},
      {"Content-Length 200 MB, no body sent", post + "Content-Length: 209715200\r\n\r\n", 413},
      {"Content-Length 200 MB with Expect: 100-continue",
       post + "Content-Length: 209715200\r\nExpect: 100-continue\r\n\r\n", 413},
      {"two conflicting Content-Length", post + "Content-Length: 2\r\nContent-Length: 20\r\n\r\n{}", 400},
      {"Content-Length with Transfer-Encoding",
       post + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"Transfer-Encoding gzip", post + "Transfer-Encoding: gzip\r\n\r\n", 501},
      {"a 40 KB header", post + "X-Big: " + std::string(40000, 'a') + "\r\n\r\n", 431},
      {"150 headers", many_headers + "\r\n", 431},
      {"a 40 KB request line", "GET /" + std::string(40000, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"HTTP/2.0", "GET /health HTTP/2.0\r\n\r\n", 505},
      {"a TLS client hello (no line end)", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), 400},
      {"a method of 100 letters", std::string(100, 'P'), 400},
      {"bad chunk size", post + "Transfer-Encoding: chunked\r\n\r\nxyz\r\n", 400},
  };
  for (const auto& [what, bytes, status] : cases) {
    const RawResponse r = exchange(bytes);
    expect_error(r, status, what);
    EXPECT_LT(r.seconds, kStall / 3) << what << ": answered only at a deadline";
    EXPECT_TRUE(r.closed) << what << ": the connection of a refused request stays open";
  }
  expect_alive("framing errors");
}

TEST_F(HostileServer, OversizedBodiesAreRefusedWithoutBufferingThem) {
  const int64_t rss0 = rss_bytes(srv_->pid());
  ASSERT_GT(rss0, 0);
  // 200 MB chunked: the server answers 413 once the body crosses 8 MiB and keeps none of it.
  {
    const int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk = "100000\r\n" + std::string(1 << 20, ' ') + "\r\n";
    int sent = 0;
    for (; sent < 200; ++sent) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) break;  // the answer is there
      if (!send_all(fd, chunk, 5)) break;
    }
    const RawResponse r = read_response(fd, 20);
    ::close(fd);
    expect_error(r, 413, "200 MB chunked body");
    EXPECT_LT(sent, 100) << "the server read far past its 8 MiB limit";
    EXPECT_NE(r.body.find("8388608"), std::string::npos) << r.body;
  }
  // 9 MB with Content-Length, sent whole: refused at the headers.
  {
    const RawResponse r =
        exchange("POST /v1/completions HTTP/1.1\r\nContent-Length: 9437184\r\n\r\n" + std::string(9437184, 'x'));
    expect_error(r, 413, "9 MB Content-Length body");
  }
  // 7 MB JSON string that never ends: 400 quoting an excerpt, not 7 MB.
  {
    const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(7 << 20, 'a');
    const RawResponse r = exchange(
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
        false);
    expect_error(r, 400, "7 MB unterminated string");
    EXPECT_NE(r.body.find("not valid JSON"), std::string::npos) << excerpt_of(r.body);
  }
  const int64_t growth = rss_bytes(srv_->pid()) - rss0;
  // The only thing kept was at most one 8 MiB body at a time (plus its JSON parse of 7 MB).
  EXPECT_LT(growth, int64_t{96} << 20) << "RSS grew by " << (growth >> 20) << " MiB";
  expect_alive("oversized bodies");
}

std::string chat_body(const std::string& extra_message_fields, const std::string& extra_fields = "") {
  return R"({"messages":[{"role":"user","content":"hi")" + extra_message_fields + "}],\"max_tokens\":2" + extra_fields +
         "}";
}

TEST_F(HostileServer, JsonBuiltToCrashOrStallIsA400) {
  const std::string deep_arr(1000000, '[');
  std::string deep_obj;
  for (int i = 0; i < 200000; ++i) deep_obj += "{\"a\":";
  std::string wide = "{";
  for (int i = 0; i < 120000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  wide += "}";
  struct Case {
    std::string what, body, param, needle;
  };
  const std::vector<Case> cases = {
      {"1M levels in an extra message field", chat_body(",\"extra\":" + deep_arr), "messages", "nests deeper"},
      {"200k levels in tool-call arguments",
       R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" +
           deep_obj + "}}]}]}",
       "messages", "nests deeper"},
      {"1M levels in chat_template_kwargs", chat_body("", ",\"chat_template_kwargs\":{\"x\":" + deep_arr),
       "chat_template_kwargs", "nests deeper"},
      {"1M levels in an unknown top-level field", chat_body("", ",\"zzz\":" + deep_arr), "zzz", "nests deeper"},
      {"120k keys in chat_template_kwargs", chat_body("", ",\"chat_template_kwargs\":" + wide), "chat_template_kwargs",
       "members"},
      {"120k keys in metadata", chat_body("", ",\"metadata\":" + wide), "metadata", "members"},
  };
  for (const auto& c : cases) {
    const auto t0 = Clock::now();
    const RawResponse r =
        exchange("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(c.body.size()) + "\r\n\r\n" + c.body,
                 false);
    expect_error(r, 400, c.what);
    const auto err = error_of(r.body);
    if (!err.is_null()) {
      EXPECT_EQ(err["param"], c.param) << c.what;
      EXPECT_NE(err["message"].get<std::string>().find(c.needle), std::string::npos) << c.what << ": " << err.dump();
    }
    EXPECT_LT(seconds_since(t0), 10) << c.what;
  }
  // A huge model name is not echoed back.
  const std::string name(1 << 20, 'm');
  const std::string named = "{\"model\":\"" + name + "\",\"prompt\":\"x\"}";
  const RawResponse r = exchange(
      "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(named.size()) + "\r\n\r\n" + named, false);
  expect_error(r, 404, "a 1 MB model name");
  expect_alive("hostile JSON");
}

TEST_F(HostileServer, ResponseAmplificationIsRefusedUpFront) {
  httplib::Client c("127.0.0.1", port());
  c.set_read_timeout(60, 0);
  // The 136-byte request that built a 115 MB answer: 16 choices x 2000 tokens x 21 entries.
  const std::string amp =
      R"({"messages":[{"role":"user","content":"hi"}],"n":16,"max_tokens":2000,"logprobs":true,"top_logprobs":20})";
  auto r = post_json(c, "/v1/chat/completions", amp);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const auto err = error_of(r->body);
  ASSERT_FALSE(err.is_null()) << r->body;
  EXPECT_EQ(err["param"], "max_tokens");
  const std::string msg = err["message"];
  for (const char* word : {"16 choices", "2000", "top logprobs 20", "672000", "400000", "stream"})
    EXPECT_NE(msg.find(word), std::string::npos) << word << " missing from: " << msg;
  // Completions: prompts x n counts the choices; max_completion_tokens is named when it was used.
  auto r2 = post_json(c, "/v1/completions", R"({"prompt":["a","b"],"n":16,"max_tokens":2500,"logprobs":5})");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 400) << r2->body;
  auto r3 = post_json(
      c, "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"n":16,"max_completion_tokens":2000,"logprobs":true,"top_logprobs":20})");
  ASSERT_TRUE(r3);
  EXPECT_EQ(error_of(r3->body)["param"], "max_completion_tokens") << r3->body;
  // Within the bound it is served; streamed it is not refused (nothing is held).
  auto ok = post_json(
      c, "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"n":2,"max_tokens":4,"logprobs":true,"top_logprobs":20})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const int fd = connect_to(port());
  const std::string stream =
      R"({"messages":[{"role":"user","content":"hi"}],"n":16,"max_tokens":2000,"logprobs":true,"top_logprobs":20,"stream":true})";
  send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(stream.size()) + "\r\n\r\n" +
                   stream);
  std::string head;
  char buf[4096];
  const auto t0 = Clock::now();
  while (head.find("\r\n\r\n") == std::string::npos && seconds_since(t0) < 30) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);  // the client leaves; the server aborts the generation
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head.substr(0, 200);
  expect_alive("amplification");
}

TEST_F(HostileServer, CurlFormEncodedBodiesAndPipelinedRequestsAreServed) {
  // curl -d sends application/x-www-form-urlencoded: the README's example with a body over 8 KB.
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})" + std::string(20000, ' ');
  const RawResponse r = exchange(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/x-www-form-urlencoded\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(r.status, 200) << r.body;
  // curl sends a body over 1 MB only after "100 Continue": it must come, then the answer.
  {
    const std::string big =
        R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})" + std::string(2 << 20, ' ');
    const int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(big.size()) +
                     "\r\nExpect: 100-continue\r\n\r\n");
    char buf[64] = {};
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 5000), 0) << "no 100 Continue";
    const ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, 0);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), "HTTP/1.1 100 Continue\r\n\r\n");
    send_all(fd, big);
    EXPECT_EQ(read_response(fd, 60).status, 200);
    ::close(fd);
  }
  // Two requests in one write, and a chunked one: answered in order on one connection.
  const int fd = connect_to(port());
  ASSERT_GE(fd, 0);
  send_all(fd,
           "GET /livez HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           "9\r\n{\"prompt\"\r\n15\r\n:\"hi\",\"max_tokens\":2}\r\n0\r\n\r\nGET /health HTTP/1.1\r\n\r\n");
  std::string carry;
  const RawResponse a = read_response(fd, 20, false, &carry);
  const RawResponse b = read_response(fd, 60, false, &carry);
  const RawResponse c = read_response(fd, 20, false, &carry);
  ::close(fd);
  EXPECT_EQ(a.status, 200);
  EXPECT_NE(a.body.find("alive"), std::string::npos) << a.body;
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_NE(b.body.find("text_completion"), std::string::npos) << b.body;
  EXPECT_EQ(c.status, 200) << c.body;
  EXPECT_FALSE(c.closed);
}

}  // namespace
}  // namespace tessera::test
