// Hostile input at the two layers below the handlers, in process (fast): HTTP/1.1 framing
// (RequestParser: every limit enforced while reading, the status of each framing error, smuggling
// defences) and the JSON guard (depth, object size, errors that quote only an excerpt). The same
// attacks against the running server are in hostile_server_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/http_wire.h"
#include "server/json_guard.h"

namespace tessera::server {
namespace {

struct Fed {
  RequestParser::State state;
  int status = 0;
  std::string message;
  size_t used = 0;
};

// Feeds `bytes` in pieces of `step` (0: at once) until the parser stops taking them.
Fed feed(RequestParser& p, const std::string& bytes, size_t step = 0) {
  Fed f;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = step ? std::min(step, bytes.size() - pos) : bytes.size() - pos;
    const size_t used = p.feed(bytes.data() + pos, n);
    pos += used;
    if (p.done() || p.failed() || used < n) break;
  }
  f.state = p.state();
  f.status = p.failed() ? p.error_status() : 0;
  f.message = p.error_message();
  f.used = pos;
  return f;
}

Fed feed_new(const std::string& bytes, WireLimits lim = {}, size_t step = 0) {
  RequestParser p(lim);
  return feed(p, bytes, step);
}

TEST(HostileWire, ContentLengthAttacksAreRefusedAtTheHeaders) {
  struct Case {
    const char* what;
    std::string head;
    int status;
  };
  const std::vector<Case> cases = {
      {"negative", "POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"past 2^64", "POST /v1/completions HTTP/1.1\r\nContent-Length: 18446744073709551617\r\n\r\n", 413},
      {"huge but valid int64", "POST /v1/completions HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\n", 413},
      {"one over the limit", "POST /v1/completions HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 413},
      {"hex", "POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400},
      {"plus sign", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400},
      {"empty", "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
      {"two different", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
      {"a list that disagrees", "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", 400},
      {"with Transfer-Encoding", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"no length on a POST", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411},
      {"no length on a PUT", "PUT /x HTTP/1.1\r\n\r\n", 411},
      {"gzip transfer coding", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"two Transfer-Encoding headers",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"chunked in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
  };
  WireLimits lim;
  lim.max_body_bytes = 1024;
  for (const auto& c : cases) {
    // Nothing after the headers: the answer must not wait for a body that will never come.
    const Fed f = feed_new(c.head, lim);
    EXPECT_EQ(f.state, RequestParser::State::kError) << c.what;
    EXPECT_EQ(f.status, c.status) << c.what << ": " << f.message;
    EXPECT_LT(f.message.size(), 200u) << c.what;
  }
  // Equal repeated values are one length (RFC 9112 §6.3 allows folding them).
  const Fed same = feed_new("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", lim);
  EXPECT_EQ(same.state, RequestParser::State::kDone);
}

TEST(HostileWire, HeaderLimitsAre431AndBoundTheBufferedBytes) {
  WireLimits lim;
  lim.max_header_bytes = 1024;
  lim.max_headers = 8;
  // One enormous header, fed a byte at a time and at once: stops at the limit, 431.
  const std::string big = "GET /health HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n";
  for (size_t step : {size_t{0}, size_t{1}, size_t{100}}) {
    const Fed f = feed_new(big, lim, step);
    EXPECT_EQ(f.status, 431) << step;
    EXPECT_LE(f.used, lim.max_header_bytes + 1) << "bytes beyond the limit were taken";
  }
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 9; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(feed_new(many + "\r\n", lim).status, 431);
  // A request line that never ends.
  EXPECT_EQ(feed_new("GET /" + std::string(5000, 'a'), lim).status, 414);
}

TEST(HostileWire, MalformedRequestsAre400Or505) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"GET\r\n\r\n", 400},
      {"GET /  HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / FOO/1.1\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417},
  };
  for (const auto& [req, status] : cases) EXPECT_EQ(feed_new(req).status, status) << excerpt(req);
}

TEST(HostileWire, ChunkedBodiesAreBoundedWhileReading) {
  WireLimits lim;
  lim.max_body_bytes = 1000;
  // 200 chunks of 100 bytes (a 20 KB body against a 1000-byte limit): refused at the chunk that
  // crosses it, and the body kept never exceeds the limit.
  std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 200; ++i) chunked += "64\r\n" + std::string(100, 'x') + "\r\n";
  chunked += "0\r\n\r\n";
  RequestParser p(lim);
  const Fed f = feed(p, chunked, 7);
  EXPECT_EQ(f.status, 413);
  EXPECT_LE(p.request().body.size(), lim.max_body_bytes);
  EXPECT_LT(f.used, 1300u);
  // A single chunk size that overflows 64 bits, one past the limit, and malformed sizes.
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF\r\n", lim).status, 413);
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", lim).status, 413);
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", lim).status, 400);
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", lim).status, 400);
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(1000, '1'), lim).status,
            400);
  EXPECT_EQ(feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", lim).status, 400);
  // Trailers count against the header limit.
  WireLimits small;
  small.max_header_bytes = 256;
  EXPECT_EQ(
      feed_new("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + std::string(1000, 'a'), small).status,
      431);
}

TEST(HostileWire, WellFormedRequestsParseWhateverTheSplit) {
  const std::string two =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\n{\"a\r\n2\r\n\":\r\n2\r\n1}\r\n0\r\nTrailer: t\r\n\r\n"
      "GET /h%65alth HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  for (size_t step = 1; step <= two.size(); step += (step < 8 ? 1 : 13)) {
    RequestParser p;
    size_t pos = 0;
    std::vector<WireRequest> got;
    while (pos < two.size() && got.size() < 3) {
      const size_t n = std::min(step, two.size() - pos);
      pos += p.feed(two.data() + pos, n);
      ASSERT_FALSE(p.failed()) << step << ": " << p.error_message();
      if (p.done()) got.push_back(p.take());
    }
    ASSERT_EQ(got.size(), 2u) << step;
    EXPECT_EQ(got[0].method, "POST");
    EXPECT_EQ(got[0].path, "/v1/completions");
    EXPECT_EQ(got[0].query, "x=1");
    EXPECT_EQ(got[0].body, "{\"a\":1}");
    EXPECT_TRUE(got[0].keep_alive);
    EXPECT_EQ(got[1].path, "/health");
    EXPECT_EQ(got[1].minor_version, 0);
    EXPECT_TRUE(got[1].keep_alive);
  }
  // A form-encoded body (curl -d) is just a body: no form limit, no parsing.
  const std::string form =
      "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
      "Content-Length: 100000\r\n\r\n" +
      std::string(100000, ' ');
  RequestParser p;
  EXPECT_EQ(feed(p, form).state, RequestParser::State::kDone);
  EXPECT_EQ(p.request().body.size(), 100000u);
}

TEST(HostileWire, ExcerptIsShortValidUtf8) {
  EXPECT_EQ(excerpt("abc"), "abc");
  const std::string cut = excerpt(std::string(1000, 'x'), 10);
  EXPECT_EQ(cut, "xxxxxxxxxx...");
  EXPECT_EQ(excerpt("a\r\n\x01", 40), "a\\r\\n\\x01");
  EXPECT_EQ(excerpt("\xff\xfe", 40), "\\xff\\xfe");
  // A 3-byte character is never split.
  EXPECT_EQ(excerpt("ab\xe4\xbd\xa0", 3), "ab\xe4\xbd\xa0");
}

void expect_400(const std::string& body, const std::string& param, const std::string& needle) {
  try {
    (void)parse_request_json(body, JsonLimits{});
    ADD_FAILURE() << "accepted: " << excerpt(body, 80);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 400u);
  }
}

TEST(HostileJson, DeepNestingAnywhereIsA400NotACrash) {
  const std::string deep(1000000, '[');
  const std::string deep_obj = [] {
    std::string s;
    for (int i = 0; i < 300000; ++i) s += "{\"a\":";
    return s;
  }();
  // In an extra (ignored) message field, in tool-call arguments, in chat_template_kwargs, at the top.
  expect_400(R"({"messages":[{"role":"user","content":"hi","extra":)" + deep + "}]}", "messages",
             "nests deeper than 64");
  expect_400(
      R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":)" +
          deep_obj + "}}]}]}",
      "messages", "nests deeper than 64");
  expect_400(R"({"chat_template_kwargs":{"x":)" + deep + "}}", "chat_template_kwargs", "nests deeper");
  expect_400(deep, "", "nests deeper");
  // Brackets inside strings are not nesting.
  EXPECT_NO_THROW((void)parse_request_json(R"({"a":")" + std::string(100000, '[') + R"("})", JsonLimits{}));
  // Exactly at the limit is fine.
  EXPECT_NO_THROW((void)parse_request_json(std::string(64, '[') + std::string(64, ']'), JsonLimits{}));
  expect_400(std::string(65, '[') + std::string(65, ']'), "", "deeper than 64");
}

TEST(HostileJson, HugeObjectsAreRefusedBeforeParsing) {
  std::string kw = R"({"model":"m","chat_template_kwargs":{)";
  for (int i = 0; i < 120000; ++i) kw += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  kw += "}}";
  const auto t0 = std::chrono::steady_clock::now();
  expect_400(kw, "chat_template_kwargs", "more than 1024 members");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // Keys that look like colons inside strings do not count.
  std::string ok = "{";
  for (int i = 0; i < 1000; ++i) ok += (i ? ",\"a:b:c" : "\"a:b:c") + std::to_string(i) + "\":\":::\"";
  ok += "}";
  EXPECT_NO_THROW((void)parse_request_json(ok, JsonLimits{}));
}

TEST(HostileJson, SyntaxErrorsQuoteAnExcerptNeverTheInput) {
  const std::string unterminated = R"({"messages":[{"role":"user","content":")" + std::string(7 << 20, 'a');
  try {
    (void)parse_request_json(unterminated, JsonLimits{});
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_LT(std::string(e.what()).size(), 400u) << excerpt(e.what(), 400);
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
  expect_400("{\"a\": tru}", "", "at byte");
  expect_400("{\"a\": \"\xff\"}", "", "not valid JSON");
  expect_400("", "", "not valid JSON");
}

}  // namespace
}  // namespace tessera::server
