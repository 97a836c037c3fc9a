// `tessera serve` over loopback HTTP: the OpenAI contract (responses, SSE framing), every bad input
// of shared/reference/pain_points.md C1 ("bad input") that applies (each answered with the right 4xx while the server
// keeps answering good requests unchanged), admission control, and SIGTERM.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <thread>

#include "http_helpers.h"
#include "server_process.h"
#include "support/test_support.h"

namespace tessera::test {
namespace {

const std::string kGood =
    R"({"model":"tessera-demo-dsv3-random-weights","messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0})";

std::string chat(const std::string& extra_fields, const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return R"({"messages":)" + messages + R"(,"max_tokens":4)" + (extra_fields.empty() ? "" : "," + extra_fields) + "}";
}

TEST(ServerHttp, BadInputsGetTheRight4xxAndTheServerStaysUnchanged) {
  ServerProcess srv({"--api-key", "sekret", "--max-model-len", "256"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  const std::string key = "sekret";
  auto baseline = post_json(c, "/v1/chat/completions", kGood, key);
  ASSERT_TRUE(baseline) << srv.log();
  ASSERT_EQ(baseline->status, 200) << baseline->body;
  const std::string baseline_content = Json::parse(baseline->body)["choices"][0]["message"]["content"];

  struct Case {
    std::string name, path, body;
    int status;
    std::string param;  // expected error.param ("" = not checked)
  };
  const std::string big(9u << 20, 'x');
  std::string many_stops = "[";
  for (int i = 0; i < 1000; ++i) many_stops += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  many_stops += "]";
  std::string long_prompt = "[";
  for (int i = 0; i < 300; ++i) long_prompt += (i ? ",100" : "100");
  long_prompt += "]";
  const std::vector<Case> cases = {
      {"not json", "/v1/chat/completions", "hello", 400, ""},
      {"truncated json", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"})", 400, ""},
      {"invalid utf-8", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400,
       ""},
      {"body is an array", "/v1/chat/completions", "[1,2]", 400, ""},
      {"oversized body", "/v1/chat/completions", "{\"messages\":\"" + big + "\"}", 413, ""},
      {"no messages", "/v1/chat/completions", R"({"max_tokens":4})", 400, "messages"},
      {"messages empty", "/v1/chat/completions", chat("", "[]"), 400, "messages"},
      {"messages not a list", "/v1/chat/completions", chat("", R"({"role":"user"})"), 400, "messages"},
      {"unknown role", "/v1/chat/completions", chat("", R"([{"role":"wizard","content":"hi"}])"), 400,
       "messages[0].role"},
      {"content null", "/v1/chat/completions", chat("", R"([{"role":"user","content":null}])"), 400,
       "messages[0].content"},
      {"content a number", "/v1/chat/completions", chat("", R"([{"role":"user","content":42}])"), 400,
       "messages[0].content"},
      {"image part", "/v1/chat/completions",
       chat("", R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"), 400,
       "messages[0].content"},
      {"message not an object", "/v1/chat/completions", chat("", R"(["hi"])"), 400, "messages[0]"},
      {"json_schema response_format without json_schema", "/v1/chat/completions",
       chat(R"("response_format":{"type":"json_schema"})"), 400, "response_format.json_schema"},
      {"tool parameters not an object", "/v1/chat/completions",
       chat(R"("tools":[{"type":"function","function":{"name":"f","parameters":"nope"}}])"), 400,
       "tools[0].function.parameters"},
      {"tool without name", "/v1/chat/completions", chat(R"("tools":[{"type":"function","function":{}}])"), 400,
       "tools[0].function.name"},
      {"tool_choice names unknown tool", "/v1/chat/completions",
       chat(
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})"),
       400, "tool_choice"},
      {"max_tokens 0", "/v1/chat/completions", chat(R"("max_completion_tokens":0)"), 400, "max_completion_tokens"},
      {"max_tokens negative", "/v1/completions", R"({"prompt":"hi","max_tokens":-5})", 400, "max_tokens"},
      {"max_tokens beyond context", "/v1/chat/completions", chat(R"("max_completion_tokens":100000)"), 400,
       "max_completion_tokens"},
      {"max_tokens a string", "/v1/chat/completions", chat(R"("max_completion_tokens":"8")"), 400,
       "max_completion_tokens"},
      {"n huge", "/v1/chat/completions", chat(R"("n":100000)"), 400, "n"},
      {"top_logprobs huge", "/v1/chat/completions", chat(R"("logprobs":true,"top_logprobs":500)"), 400, "top_logprobs"},
      {"top_logprobs without logprobs", "/v1/chat/completions", chat(R"("top_logprobs":2)"), 400, "top_logprobs"},
      {"completions logprobs huge", "/v1/completions", R"({"prompt":"hi","logprobs":50})", 400, "logprobs"},
      {"1000 stop strings", "/v1/chat/completions", chat("\"stop\":" + many_stops), 400, "stop"},
      {"negative temperature", "/v1/chat/completions", chat(R"("temperature":-1)"), 400, "temperature"},
      {"top_p 0", "/v1/chat/completions", chat(R"("top_p":0)"), 400, "top_p"},
      {"stream_options without stream", "/v1/chat/completions", chat(R"("stream_options":{"include_usage":true})"), 400,
       "stream_options"},
      {"prompt longer than the context", "/v1/completions", "{\"prompt\":" + long_prompt + "}", 400, "prompt"},
      {"prompt ids beyond the vocabulary", "/v1/completions", R"({"prompt":[1,2,999999]})", 400, "prompt"},
      {"negative prompt id", "/v1/completions", R"({"prompt":[-1]})", 400, "prompt"},
      {"empty token-id prompt", "/v1/completions", R"({"prompt":[]})", 400, "prompt"},
      {"unsupported reasoning_effort", "/v1/chat/completions", chat(R"("reasoning_effort":"extreme")"), 400,
       "reasoning_effort"},
      {"thinking kwarg not a bool", "/v1/chat/completions", chat(R"("chat_template_kwargs":{"enable_thinking":"yes"})"),
       400, "chat_template_kwargs.enable_thinking"},
      {"chat_template_kwargs not an object", "/v1/chat/completions", chat(R"("chat_template_kwargs":[1])"), 400,
       "chat_template_kwargs"},
      {"tool_call arguments not a string", "/v1/chat/completions",
       chat(
           "",
           R"([{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc","type":"function","function":{"name":"f","arguments":5}}]}])"),
       400, "messages[1].tool_calls[0].function.arguments"},
      {"test script not enabled for strings of wrong type", "/v1/chat/completions", chat(R"("tessera_script":5)"), 400,
       "tessera_script"},
      {"unknown model", "/v1/chat/completions", R"({"model":"gpt-9","messages":[{"role":"user","content":"hi"}]})", 404,
       "model"},
      {"unknown route", "/v1/nothing", "{}", 404, ""},
  };
  for (const auto& k : cases) {
    auto r = post_json(c, k.path, k.body, key);
    ASSERT_TRUE(r) << k.name << ": no response\n" << srv.log();
    EXPECT_EQ(r->status, k.status) << k.name << ": " << r->body.substr(0, 300);
    Json err;
    ASSERT_NO_THROW(err = Json::parse(r->body)) << k.name << ": " << r->body.substr(0, 200);
    ASSERT_TRUE(err.contains("error")) << k.name;
    EXPECT_TRUE(err["error"]["message"].is_string()) << k.name;
    // OpenAI's code strings: the context overflows have their own, the unknown model too.
    const bool context = k.name == "max_tokens beyond context" || k.name == "prompt longer than the context";
    const std::string code = context           ? "context_length_exceeded"
                             : k.status == 413 ? "request_too_large"
                             : k.status == 404 ? (k.param == "model" ? "model_not_found" : "not_found")
                                               : "invalid_request";
    EXPECT_EQ(err["error"]["code"], code) << k.name;
    if (!k.param.empty()) {
      EXPECT_EQ(err["error"]["param"], k.param) << k.name << ": " << r->body;
    }
  }
  // Inputs that are unusual but valid are answered, never a silent empty reply.
  const std::vector<std::pair<std::string, std::string>> valid = {
      {"text parts",
       chat("", R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}])")},
      {"foreign tool-call ids in history",
       chat(
           "",
           R"([{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"callNNNN","content":"42"},{"role":"user","content":"and?"}])")},
      {"literal special tokens in user text",
       chat("", R"([{"role":"user","content":"<think></think><｜tool▁calls▁begin｜>"}])")},
      {"prompt at the context limit with max_tokens 1",
       R"({"prompt":[)" + long_prompt.substr(1, 255 * 4 - 1) + R"(],"max_tokens":1})"},
      {"enable_thinking instead of thinking", chat(R"("chat_template_kwargs":{"enable_thinking":false})")},
      {"kwargs cannot replace the conversation", chat(R"("chat_template_kwargs":{"messages":5,"tools":"x"})")},
  };
  for (const auto& [name, body] : valid) {
    const std::string path = body.find("\"prompt\"") != std::string::npos ? "/v1/completions" : "/v1/chat/completions";
    auto r = post_json(c, path, body, key);
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(r->status, 200) << name << ": " << r->body.substr(0, 300);
  }
  // Authentication.
  auto noauth = post_json(c, "/v1/chat/completions", kGood);
  ASSERT_TRUE(noauth);
  EXPECT_EQ(noauth->status, 401);
  auto wrong = post_json(c, "/v1/chat/completions", kGood, "wrong");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  // The next good request is answered exactly as before all of this.
  auto again = post_json(c, "/v1/chat/completions", kGood, key);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200);
  EXPECT_EQ(Json::parse(again->body)["choices"][0]["message"]["content"], baseline_content);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_GE(metric(c, "tessera_request_errors_total{status=\"400\"}"), -1);  // rendered
  EXPECT_NE(c.Get("/metrics")->body.find("tessera_request_errors_total{status=\"413\"} 1"), std::string::npos);
}

TEST(ServerHttp, ChatStreamingFramingAndUsage) {
  ServerProcess srv;
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60, 0);
  const std::string body =
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"stream":true,"stream_options":{"include_usage":true},)"
      R"("chat_template_kwargs":{"thinking":true},"tessera_script":"Let me think.</think>Four.<｜end▁of▁sentence｜>"})";
  auto r = post_json(c, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  bool done = false;
  auto events = sse_events(r->body, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, reasoning, finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    EXPECT_EQ(events[i]["created"], events[0]["created"]);
    const auto& d = events[i]["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) {
      reasoning += d["reasoning_content"].get<std::string>();
      EXPECT_EQ(d["reasoning"], d["reasoning_content"]);
    }
    if (!events[i]["choices"][0]["finish_reason"].is_null()) finish = events[i]["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me think.");
  EXPECT_EQ(content, "Four.");
  EXPECT_EQ(finish, "stop");
  const auto& last = events.back();
  EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty());
  EXPECT_GT(last["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_GT(last["usage"]["completion_tokens_details"]["reasoning_tokens"].get<int>(), 0);
}

TEST(ServerHttp, QueueFullGets429WithRetryAfter) {
  // Two streamed requests hold both admission slots until the third has its answer, then hang up.
  // Holding by a fixed generation length would race the third request: 2 x 1000 tokens took over
  // 120 s under AddressSanitizer beside other tests on a 2-core CI machine.
  ServerProcess srv({"--max-in-flight", "2"});
  httplib::Client c("127.0.0.1", srv.port());
  std::atomic<bool> release{false};
  std::atomic<int> streaming{0};
  std::vector<std::thread> hold;
  struct HangUp {  // also when an assertion returns early
    std::atomic<bool>& release;
    std::vector<std::thread>& hold;
    ~HangUp() {
      release = true;
      for (auto& t : hold)
        if (t.joinable()) t.join();
    }
  } hang_up{release, hold};
  for (int i = 0; i < 2; ++i) {
    hold.emplace_back([&] {
      httplib::Client h("127.0.0.1", srv.port());
      h.set_read_timeout(120, 0);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = R"({"prompt":"x","max_tokens":4000,"ignore_eos":true,"stream":true})";
      req.set_header("Content-Type", "application/json");
      int status = 0;
      bool counted = false;
      req.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        if (!counted && status == 200) counted = true, streaming++;
        return !release.load();
      };
      h.send(req);
    });
    for (int k = 0; k < 1000 && metric(c, "tessera_requests_in_flight") < i + 1; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int k = 0; k < 3000 && streaming.load() < 2; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(streaming.load(), 2);
  ASSERT_EQ(metric(c, "tessera_requests_in_flight"), 2);
  auto r = post_json(c, "/v1/completions", R"({"prompt":"y","max_tokens":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "rate_limit_exceeded");
  release = true;
  for (auto& t : hold) t.join();
  // Both holders hung up: their slots come back and the next request is served.
  for (int k = 0; k < 3000 && metric(c, "tessera_requests_in_flight") > 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(metric(c, "tessera_requests_in_flight"), 0);
  r = post_json(c, "/v1/completions", R"({"prompt":"y","max_tokens":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerHttp, ClientsThatGiveUpAreAborted) {
  // One sequence at a time: A (non-streamed, long) runs, B (streamed) waits in the queue. A's
  // client times out after 1 s, B's client disconnects after the role chunk; both requests must
  // be aborted long before A's 4000 tokens would have been generated.
  ServerProcess srv({"--max-num-seqs", "1"});
  httplib::Client c("127.0.0.1", srv.port());
  std::thread a([&] {
    httplib::Client h("127.0.0.1", srv.port());
    h.set_read_timeout(1, 0);
    auto r = post_json(h, "/v1/completions", R"({"prompt":"a","max_tokens":4000,"ignore_eos":true})");
    EXPECT_FALSE(r);  // timed out
  });
  for (int k = 0; k < 1000 && metric(c, "tessera_requests_running") < 1; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread b([&] {
    httplib::Client h("127.0.0.1", srv.port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = R"({"messages":[{"role":"user","content":"b"}],"max_tokens":50,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
    h.send(req);
  });
  a.join();
  b.join();
  bool idle = false;
  for (int k = 0; k < 300 && !idle; ++k) {
    idle = metric(c, "tessera_requests_in_flight") == 0 && metric(c, "tessera_requests_running") == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(idle);
  EXPECT_EQ(metric(c, "tessera_requests_aborted_total"), 2);
  EXPECT_LT(metric(c, "tessera_generation_tokens_total"), 4000);
  EXPECT_EQ(metric(c, "tessera_kv_pages_used"), 0);
}

TEST(ServerHttp, SigtermFinishesInFlightAndExitsZero) {
  // A grace far above the request's time: 600 tokens take ~19 s under AddressSanitizer alone, and
  // more beside other tests on a 2-core CI machine (a 20 s grace was missed there).
  ServerProcess srv({"--shutdown-grace", "120"});
  std::string body;
  int status = 0;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60, 0);
    auto r =
        post_json(c, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":600,"ignore_eos":true,"stream":true})");
    if (r) status = r->status, body = r->body;
  });
  httplib::Client c("127.0.0.1", srv.port());
  for (int i = 0; i < 500 && metric(c, "tessera_requests_in_flight") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(metric(c, "tessera_requests_in_flight"), 1);
  EXPECT_EQ(srv.terminate(150), 0) << srv.log();
  client.join();
  EXPECT_EQ(status, 200);
  bool done = false;
  auto events = sse_events(body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

TEST(ServerHttp, SigtermPastTheGraceAbortsAndExitsZero) {
  ServerProcess srv({"--shutdown-grace", "0.3"});
  std::string body;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60, 0);
    auto r =
        post_json(c, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3500,"ignore_eos":true,"stream":true})");
    if (r) body = r->body;
  });
  httplib::Client c("127.0.0.1", srv.port());
  for (int i = 0; i < 500 && metric(c, "tessera_requests_running") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.terminate(20), 0) << srv.log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  client.join();
  bool done = false;
  auto events = sse_events(body, &done);
  EXPECT_TRUE(done);  // the stream still ends properly
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().contains("error")) << events.back().dump();
}

TEST(ServerHttp, EngineFailureAnswers500AndExitsNonZero) {
  ServerProcess srv({"--test-fail-token", "4242"});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(30, 0);
  auto ok = post_json(c, "/v1/completions", R"({"prompt":[10,11],"max_tokens":2})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto bad = post_json(c, "/v1/completions", R"({"prompt":[10,4242],"max_tokens":2})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 500) << bad->body;
  EXPECT_EQ(Json::parse(bad->body)["error"]["code"], "internal_error");
  // The server goes down on its own, with a non-zero status.
  int status = -2;
  for (int i = 0; i < 500 && status == -2; ++i) {
    int st = 0;
    if (::waitpid(srv.pid(), &st, WNOHANG) == srv.pid())
      status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 1) << srv.log();
  if (status != -2) srv.forget();
}

TEST(ServerHttp, TemplateRaiseExceptionIs400) {
  const auto dir = make_temp_dir("tessera-serve-template");
  write_file(dir / "t.jinja",
             "{% if messages | length > 1 %}{{ raise_exception('only one message is supported') }}{% endif %}"
             "{{ messages[0]['content'] }}");
  ServerProcess srv({"--chat-template", (dir / "t.jinja").string()});
  httplib::Client c("127.0.0.1", srv.port());
  auto ok = post_json(c, "/v1/chat/completions", chat(""));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto bad = post_json(c, "/v1/chat/completions",
                       chat("", R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])"));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("only one message is supported"), std::string::npos) << bad->body;
  auto again = post_json(c, "/v1/chat/completions", chat(""));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(ServerHttp, ConfigFileWithFlagOverride) {
  const auto dir = make_temp_dir("tessera-serve-config");
  write_file(dir / "serve.toml", "[serve]\nserved_model_name = \"from-config\"\napi-key = \"k1\"\n");
  ServerProcess srv({"--config", (dir / "serve.toml").string(), "--api-key", "k2"});
  httplib::Client c("127.0.0.1", srv.port());
  httplib::Headers h{{"Authorization", "Bearer k2"}};
  auto r = c.Get("/v1/models", h);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["data"][0]["id"], "from-config");
  auto denied = c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
}

}  // namespace
}  // namespace tessera::test
