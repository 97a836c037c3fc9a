// The API surface browsers, proxies and SDKs rely on: CORS (--allowed-origins; none by default),
// 405 with Allow for a known path and another method, X-Request-Id on every response, the
// `developer` role rendered as the system role, and the legacy completions' logprobs listing the
// sampled token, and logit_bias steering the draw. CorsPolicy alone, then through `tessera serve`.
#include "server/cors.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "http_helpers.h"
#include "server_process.h"
#include "support/test_support.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::test {
namespace {

using server::CorsPolicy;

server::WireRequest request(const std::string& method, std::vector<std::pair<std::string, std::string>> headers) {
  server::WireRequest w;
  w.method = method;
  w.path = "/v1/chat/completions";
  w.headers = std::move(headers);
  return w;
}

std::string header_of(const server::HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(CorsPolicy, OriginsAreRefusedByNameUnlessBrowserShaped) {
  for (const std::string bad :
       {"", "app.example.com", "https://app.example.com/", "https://app.example.com/path", "HTTPS://x", "https://"}) {
    try {
      CorsPolicy p({bad});
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--allowed-origins '" + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(CorsPolicy({"http://localhost:3000", "https://app.example.com", "*"}));
}

TEST(CorsPolicy, ExactOriginsOrAny) {
  const CorsPolicy none;
  EXPECT_FALSE(none.enabled());
  EXPECT_FALSE(none.allows("https://app.example.com"));
  const CorsPolicy one({"https://app.example.com"});
  EXPECT_TRUE(one.allows("https://app.example.com"));
  EXPECT_FALSE(one.allows("https://app.example.com:8443"));
  EXPECT_FALSE(one.allows("https://evil.example.com"));
  EXPECT_FALSE(one.allows(""));
  const CorsPolicy any({"*"});
  EXPECT_TRUE(any.allows("https://anything.example"));
  EXPECT_FALSE(any.allows(""));  // not a cross-origin request
}

TEST(CorsPolicy, PreflightAndResponseHeaders) {
  const CorsPolicy one({"https://app.example.com"});
  const auto pre =
      request("OPTIONS", {{"Origin", "https://app.example.com"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}});
  ASSERT_TRUE(CorsPolicy::is_preflight(pre));
  EXPECT_FALSE(CorsPolicy::is_preflight(request("OPTIONS", {{"Origin", "https://app.example.com"}})));
  server::HttpResponse res;
  ASSERT_TRUE(one.answer_preflight(pre, "POST", res));
  EXPECT_EQ(res.status, 204);
  EXPECT_EQ(header_of(res, "Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_EQ(header_of(res, "Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(header_of(res, "Access-Control-Allow-Headers"), "authorization, content-type, x-stainless-os");
  EXPECT_EQ(header_of(res, "Vary"), "Origin");
  server::HttpResponse refused;
  EXPECT_FALSE(one.answer_preflight(
      request("OPTIONS", {{"Origin", "https://evil.example.com"}, {"Access-Control-Request-Method", "POST"}}), "POST",
      refused));
  EXPECT_TRUE(refused.headers.empty());

  server::HttpResponse actual;
  one.add_headers(request("POST", {{"Origin", "https://app.example.com"}}), actual);
  EXPECT_EQ(header_of(actual, "Access-Control-Allow-Origin"), "https://app.example.com");
  server::HttpResponse other;
  one.add_headers(request("POST", {{"Origin", "https://evil.example.com"}}), other);
  EXPECT_TRUE(other.headers.empty());
  server::HttpResponse star;
  CorsPolicy({"*"}).add_headers(request("POST", {{"Origin", "https://x.example"}}), star);
  EXPECT_EQ(header_of(star, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header_of(star, "Vary"), "");
}

TEST(ServerApiSurface, CorsThroughTheServer) {
  ServerProcess srv({"--allowed-origins", "https://app.example.com,http://localhost:3000", "--api-key", "k"});
  httplib::Client c("127.0.0.1", srv.port());
  // A browser's preflight has no Authorization: answered before the key check.
  auto r = c.Options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                              {"Access-Control-Request-Method", "POST"},
                                              {"Access-Control-Request-Headers", "authorization,content-type"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");
  EXPECT_TRUE(r->body.empty());
  r = c.Options("/v1/chat/completions",
                {{"Origin", "https://evil.example.com"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  EXPECT_NE(Json::parse(r->body)["error"]["message"].get<std::string>().find("--allowed-origins"), std::string::npos);
  // The actual request, and its error answers too, carry the header the page needs to read them.
  r = c.Post("/v1/chat/completions", {{"Origin", "https://app.example.com"}, {"Authorization", "Bearer k"}},
             R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example.com");
  r = c.Post("/v1/chat/completions", {{"Origin", "https://app.example.com"}}, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example.com");
  r = c.Get("/health", {{"Origin", "https://evil.example.com"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerApiSurface, NoCorsByDefaultAnd405AndRequestIds) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  auto r = c.Options("/v1/chat/completions",
                     {{"Origin", "http://localhost:3000"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = c.Post("/v1/completions", {{"Origin", "http://localhost:3000"}}, R"({"prompt":"x","max_tokens":1})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));

  // A known path with another method: 405 and what it takes; an unknown path stays 404.
  r = c.Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST, OPTIONS");
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "method_not_allowed");
  r = c.Post("/health", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD, OPTIONS");
  r = c.Get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);

  // X-Request-Id: the client's own echoed, else one made up; unusable values are replaced.
  r = c.Get("/health", {{"X-Request-Id", "trace-42"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "trace-42");
  r = c.Get("/health", {{"X-Request-Id", std::string(200, 'a')}});
  ASSERT_TRUE(r);
  const std::string made = r->get_header_value("X-Request-Id");
  EXPECT_EQ(made.rfind("req-", 0), 0u) << made;
  r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Request-Id").rfind("req-", 0), 0u);
  EXPECT_NE(r->get_header_value("X-Request-Id"), made);
}

TEST(ServerApiSurface, DeveloperRoleIsTheSystemRole) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  auto prompt_tokens = [&](const std::string& role) {
    auto r = post_json(c, "/v1/chat/completions",
                       R"({"messages":[{"role":")" + role +
                           R"(","content":"Answer in French."},{"role":"user","content":"hi"}],"max_tokens":1})");
    EXPECT_TRUE(r && r->status == 200) << role;
    return r && r->status == 200 ? Json::parse(r->body)["usage"]["prompt_tokens"].get<int>() : -1;
  };
  const int system = prompt_tokens("system"), developer = prompt_tokens("developer");
  EXPECT_EQ(developer, system);
  // Not vacuous: the instruction is in the prompt, so without it the prompt is shorter.
  auto r = post_json(c, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})");
  ASSERT_TRUE(r && r->status == 200);
  EXPECT_LT(Json::parse(r->body)["usage"]["prompt_tokens"].get<int>(), system);
}

TEST(ServerApiSurface, CompletionLogprobsListTheSampledToken) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  for (int k : {0, 2}) {
    auto r = post_json(c, "/v1/completions", R"({"prompt":"hi","max_tokens":4,"logprobs":)" + std::to_string(k) + "}");
    ASSERT_TRUE(r && r->status == 200) << k;
    const Json lp = Json::parse(r->body)["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 4u) << lp;
    for (size_t i = 0; i < 4; ++i) {
      const Json& top = lp["top_logprobs"][i];
      const std::string token = lp["tokens"][i];
      // The top k, plus the sampled token when it is not among them.
      EXPECT_GE(top.size(), static_cast<size_t>(std::max(k, 1))) << top;
      EXPECT_LE(top.size(), static_cast<size_t>(k + 1)) << top;
      ASSERT_TRUE(top.contains(token)) << k << ": " << top;
      EXPECT_FLOAT_EQ(top[token].get<float>(), lp["token_logprobs"][i].get<float>());
    }
  }
}

// logit_bias reaches the sampler: +100 on one token makes greedy pick it at every step (the demo
// model's logits are a few units apart), and a plain greedy request does not.
TEST(ServerApiSurface, LogitBiasSteersTheDraw) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  auto tokens = [&](const std::string& extra) {
    auto r =
        post_json(c, "/v1/completions", R"({"prompt":"hi","max_tokens":4,"temperature":0,"logprobs":0)" + extra + "}");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : srv.log());
    return r ? Json::parse(r->body)["choices"][0]["logprobs"]["tokens"] : Json::array();
  };
  const Json plain = tokens("");
  ASSERT_EQ(plain.size(), 4u);
  const Json biased = tokens(R"(,"logit_bias":{"1000":100})");
  ASSERT_EQ(biased.size(), 4u);
  for (const auto& t : biased) EXPECT_EQ(t, biased[0]) << biased;
  EXPECT_NE(biased, plain);
}

// Completions `echo`: the prompt's text before each choice's text, streamed or not, for string and
// token-id prompts; with logprobs (which would need the prompt's logprobs) a 400 naming echo.
TEST(ServerApiSurface, CompletionsEchoThePrompt) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  auto texts = [&](const std::string& body) {
    auto r = post_json(c, "/v1/completions", body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : srv.log());
    std::vector<std::string> out;
    if (!r || r->status != 200) return out;
    const Json body_json = Json::parse(r->body);  // named: a range-for over a temporary's member dangles
    for (const auto& ch : body_json["choices"]) out.push_back(ch["text"].get<std::string>());
    return out;
  };
  const std::string common = R"("max_tokens":5,"temperature":0,"n":2)";
  const auto plain = texts(R"({"prompt":["One two","Three"],)" + common + "}");
  const auto echoed = texts(R"({"prompt":["One two","Three"],"echo":true,)" + common + "}");
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(echoed.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(echoed[i], std::string(i < 2 ? "One two" : "Three") + plain[i]) << i;

  // Streamed: the echo chunk first, then the same text.
  auto r = post_json(c, "/v1/completions", R"({"prompt":"One two","echo":true,"stream":true,)" + common + "}");
  ASSERT_TRUE(r && r->status == 200);
  bool done = false;
  std::string streamed[2];
  for (const auto& e : sse_events(r->body, &done))
    for (const auto& ch : e["choices"]) streamed[ch["index"].get<int>()] += ch["text"].get<std::string>();
  EXPECT_TRUE(done);
  EXPECT_EQ(streamed[0], echoed[0]);
  EXPECT_EQ(streamed[1], echoed[1]);

  // Token ids echo as their decoded text (the demo model's tokenizer is the DeepSeek-V3 fixture's).
  const auto tok = text::load_tokenizer(fixtures_dir() / "tokenizers" / "deepseek-v3");
  text::EncodeOptions as_served;  // the server's default for completions: BOS first
  as_served.add_special_tokens = true;
  const auto ids = tok->encode("One two", as_served);
  std::string id_list;
  for (int32_t id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  const auto from_ids = texts(R"({"prompt":[)" + id_list + R"(],"echo":true,)" + common + "}");
  ASSERT_EQ(from_ids.size(), 2u);
  EXPECT_EQ(from_ids[0], echoed[0]);
  auto bad = post_json(c, "/v1/completions", R"({"prompt":"hi","max_tokens":2,"echo":true,"logprobs":1})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["param"], "echo");
}

}  // namespace
}  // namespace tessera::test
