#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <regex>
#include <thread>

#include "core/error.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/client_connection.h"
#include "server/generation.h"
#include "server/http_live.h"
#include "server/json_guard.h"
#include "server/response_json.h"

namespace tessera::server {
namespace {

constexpr const char* kJson = "application/json";

// Error bodies are bounded: a message or param built from client input (a model name, a template's
// raise_exception text) is cut to an excerpt, so an error never echoes a large request back. They
// are in the shape of the API asked: Anthropic's on /v1/messages (its SDKs read error.type),
// OpenAI's everywhere else.
void send_error(HttpResponse& res, int status, const std::string& message, const std::string& param = {},
                bool anthropic = false, const std::string& code = {}) {
  constexpr size_t kMaxMessage = 1024, kMaxParam = 128;
  res.status = status;
  const std::string m = message.size() > kMaxMessage ? excerpt(message, kMaxMessage) : message;
  const std::string p = param.size() > kMaxParam ? excerpt(param, kMaxParam) : param;
  res.set_content(dump(anthropic ? anthropic_error_json(status, m, p) : error_json(status, m, p, code)), kJson);
  if (status == 429 || status == 503) res.set_header("Retry-After", "1");
}

// The methods a known path takes ("" for an unknown path): another method gets 405 with Allow.
std::string route_methods(const std::string& path) {
  if (path == "/health" || path == "/readyz" || path == "/livez" || path == "/metrics" || path == "/v1/models" ||
      (path.rfind("/v1/models/", 0) == 0 && path.size() > 11))
    return "GET, HEAD";
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/messages" ||
      path == "/v1/messages/count_tokens" || path == "/v1/responses")
    return "POST";
  return "";
}

// The request's id for logs and the X-Request-Id response header: the client's own (a proxy's or
// an SDK's) when it is a short token of visible ASCII, so both sides can find the same request.
std::optional<std::string> client_request_id(const WireRequest& w) {
  const std::string& id = w.header("X-Request-Id");
  if (id.empty() || id.size() > 128) return std::nullopt;
  for (char c : id)
    if (c <= ' ' || c > '~') return std::nullopt;
  return id;
}

// Compares in time independent of where the strings differ (API keys).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The bearer token; on /v1/messages also Anthropic's x-api-key header, which its SDKs send.
bool api_key_ok(const WireRequest& w, const std::string& key, bool anthropic) {
  if (same_secret(w.header("Authorization"), "Bearer " + key)) return true;
  return anthropic && same_secret(w.header("x-api-key"), key);
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

HttpServer::HttpServer(const ServedModel& model, ServerOptions options)
    : model_(model), opt_(std::move(options)), created_(now_unix()) {
  ListenerOptions lo;
  lo.host = opt_.host;
  lo.port = opt_.port;
  lo.limits.max_body_bytes = opt_.max_body_bytes;
  lo.limits.max_header_bytes = opt_.max_header_bytes;
  lo.workers = opt_.threads > 0 ? opt_.threads : static_cast<int>(opt_.max_in_flight) + 32;
  lo.max_connections = opt_.max_connections;
  lo.max_buffered_body_bytes = opt_.max_buffered_body_bytes;
  lo.idle_timeout_s = opt_.idle_timeout_s;
  lo.header_timeout_s = opt_.header_timeout_s;
  lo.body_timeout_s = opt_.body_timeout_s;
  lo.write_timeout_s = opt_.write_timeout_s;
  http_ = std::make_unique<HttpListener>(
      lo, [this](const HttpRequest& req, HttpResponse& res) { handle(req, res); },
      [this](int status, const std::string& message) {
        metrics_.count_error(status);
        return dump(error_json(status, message));
      });
}

HttpServer::~HttpServer() {
  // The engine outlives this server; its thread must not call back into a destroyed one.
  if (engine_ready_) engine_->on_loop_failure(nullptr);
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shutdown_thread_.joinable()) shutdown_thread_.join();
}

void HttpServer::set_engine(engine::Engine& engine) {
  TESSERA_CHECK(!engine_ready_.load(), "HttpServer::set_engine called twice");
  engine_ = &engine;
  engine_ready_ = true;  // publishes engine_ to the HTTP threads
  engine.on_loop_failure([this](const std::string& why) { on_engine_failure("the engine thread died: " + why); });
  if (!draining_) spdlog::info("ready: the model is loaded and requests are served");
}

void HttpServer::request_shutdown(double grace_seconds) {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shutdown_thread_.joinable()) return;
  shutdown_thread_ = std::thread([this, grace_seconds] { shutdown(grace_seconds); });
}

void HttpServer::on_engine_failure(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(fatal_mutex_);
    if (fatal_.load()) return;
    fatal_reason_ = why;
    fatal_ = true;
  }
  spdlog::error("{}: shutting down (exit status 1)", why);
  request_shutdown(5);
}

bool HttpServer::healthy() {
  if (!engine_ready_.load() || draining_.load() || fatal_.load()) return false;
  const engine::EngineMetrics m = engine_->metrics();
  std::lock_guard<std::mutex> lock(health_mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (m.steps != last_steps_ || m.waiting + m.running == 0 || metrics_.in_flight.load() == 0) {
    last_steps_ = m.steps;
    last_progress_ = now;
    return true;
  }
  return std::chrono::duration<double>(now - last_progress_).count() < opt_.stall_seconds;
}

std::string HttpServer::next_id(const char* prefix) {
  return fmt::format("{}-{:x}{:06x}", prefix, static_cast<uint64_t>(created_), counter_.fetch_add(1));
}

int HttpServer::bind() {
  opt_.port = http_->bind();
  return opt_.port;
}

bool HttpServer::run() { return http_->run(); }

void HttpServer::stop_listening() { http_->stop(); }

void HttpServer::shutdown(double grace_seconds) {
  if (draining_.exchange(true)) return;
  spdlog::info("shutting down: refusing new requests, waiting up to {:.1f} s for {} in flight", grace_seconds,
               metrics_.in_flight.load());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds);
  while (metrics_.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (metrics_.in_flight.load() > 0) {
    spdlog::warn("shutdown: aborting {} requests still in flight", metrics_.in_flight.load());
    abort_all_ = true;
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (metrics_.in_flight.load() > 0 && std::chrono::steady_clock::now() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop_listening();
}

void HttpServer::readiness(HttpResponse& res) {
  auto not_ready = [&](const char* status, const std::string& message) {
    res.status = 503;
    res.set_content(dump(OJson{{"status", status}, {"message", message}}), kJson);
  };
  if (!engine_ready_) {
    if (draining_) return not_ready("draining", "the server is shutting down (the model was still loading)");
    const auto progress = load_.progress_json();
    res.status = 503;
    res.set_header("Retry-After", std::to_string(load_.retry_after_seconds()));
    res.set_content(dump(OJson{{"status", "loading"}, {"progress", progress}}), kJson);
    return;
  }
  if (fatal_) {
    std::lock_guard<std::mutex> lock(fatal_mutex_);
    return not_ready("failed", fatal_reason_);
  }
  if (draining_) return not_ready("draining", "the server is shutting down");
  if (!healthy()) {
    return not_ready("stalled", fmt::format("the engine has work but finished no step for {:g} s", opt_.stall_seconds));
  }
  res.set_content("{\"status\":\"ok\"}", kJson);
}

void HttpServer::handle(const HttpRequest& req, HttpResponse& res) {
  const WireRequest& w = req.wire;
  const std::string& path = w.path;
  const bool get = w.method == "GET" || w.method == "HEAD";
  const std::string methods = route_methods(path);
  const bool anthropic = path == "/v1/messages" || path == "/v1/messages/count_tokens";
  auto route = [&] {
    // A browser's preflight carries no credentials: answered before the API key check.
    if (CorsPolicy::is_preflight(w) && !methods.empty()) {
      if (!opt_.cors.answer_preflight(w, methods, res))
        send_error(res, 403,
                   fmt::format("cross-origin requests from '{}' are not allowed (serve --allowed-origins)",
                               excerpt(w.header("Origin"), 200)),
                   {}, anthropic);
      return;
    }
    if (path.rfind("/v1/", 0) == 0) {
      if (!opt_.api_key.empty() && !api_key_ok(w, opt_.api_key, anthropic))
        return send_error(res, 401,
                          anthropic
                              ? "a valid API key is required: send 'x-api-key: <key>' or 'Authorization: Bearer <key>'"
                              : "a valid API key is required: send 'Authorization: Bearer <key>'",
                          {}, anthropic);
      // Before the model is loaded no /v1 route can answer; clients (the OpenAI SDKs included)
      // retry a 503 after Retry-After, here the load's remaining time as far as it can be told.
      if (!engine_ready_) {
        const LoadStatus::Snapshot p = load_.snapshot();
        send_error(res, 503,
                   draining_ ? std::string("the server is shutting down")
                             : fmt::format("the model is loading ({:.0f}% of the weights after {:.0f} s); retry later",
                                           p.fraction * 100, p.seconds),
                   {}, anthropic);
        if (!draining_) res.set_header("Retry-After", std::to_string(load_.retry_after_seconds()));
        return;
      }
    }
    // Readiness: can this server answer generation requests now (load balancers, Kubernetes
    // readinessProbe, systemd health checks). /health is the name vLLM, TGI and llama.cpp use.
    if (get && (path == "/health" || path == "/readyz")) return readiness(res);
    // Liveness: the process is up and answers HTTP, whatever its state (a livenessProbe that
    // restarts the process must not fire during a long load). It exits by itself when it fails.
    if (get && path == "/livez") {
      const char* state = fatal_ ? "failed" : draining_ ? "draining" : engine_ready_ ? "ready" : "loading";
      return res.set_content(dump(OJson{{"status", "alive"}, {"state", state}}), kJson);
    }
    if (get && path == "/metrics") {
      const bool ready = engine_ready_;
      return res.set_content(metrics_.render(ready ? engine_->metrics() : engine::EngineMetrics{}, healthy(),
                                             ready ? 1.0 : load_.snapshot().fraction),
                             "text/plain; version=0.0.4");
    }
    auto model_card = [this] {
      return OJson{{"id", model_.id},
                   {"object", "model"},
                   {"created", created_},
                   {"owned_by", model_.random_weights ? "tessera (demo, random weights)" : model_.owned_by},
                   {"root", model_.id},
                   {"max_model_len", model_.max_model_len},
                   {"random_weights", model_.random_weights}};
    };
    if (get && path == "/v1/models")
      return res.set_content(dump(OJson{{"object", "list"}, {"data", OJson::array({model_card()})}}), kJson);
    if (get && path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
      const std::string id = path.substr(11);
      if (id != model_.id)
        return send_error(res, 404, fmt::format("The model '{}' does not exist", excerpt(id, 80)), "model");
      return res.set_content(dump(model_card()), kJson);
    }
    const bool post = w.method == "POST";
    if (post && path == "/v1/chat/completions") return generate(req, res, Endpoint::kChat);
    if (post && path == "/v1/completions") return generate(req, res, Endpoint::kCompletion);
    if (post && path == "/v1/messages") return generate(req, res, Endpoint::kMessages);
    if (post && path == "/v1/responses") return generate(req, res, Endpoint::kResponses);
    // Rendering and tokenizing only: answered here, without an admission slot or the engine.
    if (post && path == "/v1/messages/count_tokens") {
      try {
        const OJson body = parse_request_json(w.body, opt_.json_limits());
        return res.set_content(dump(OJson{{"input_tokens", count_message_tokens(body, model_, opt_.limits)}}), kJson);
      } catch (const ApiError& e) {
        return send_error(res, e.status(), e.what(), e.param(), true, e.code());
      } catch (const core::Error& e) {
        return send_error(res, 400, excerpt(e.what(), 2000), {}, true);
      }
    }
    if (methods.empty())
      return send_error(res, 404, fmt::format("no route for {} {}", excerpt(w.method, 16), excerpt(path, 80)));
    res.set_header("Allow", methods + ", OPTIONS");
    if (w.method == "OPTIONS") {
      res.status = 204;
      return;
    }
    send_error(res, 405,
               fmt::format("{} is not allowed on {} (it takes {})", excerpt(w.method, 16), excerpt(path, 80), methods),
               {}, anthropic);
  };
  try {
    route();
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    res = HttpResponse{};
    send_error(res, 500, excerpt(e.what(), 400), {}, anthropic);
  }
  opt_.cors.add_headers(w, res);
  res.set_header("X-Request-Id", client_request_id(w).value_or(next_id("req")));
  if (res.status >= 400) metrics_.count_error(res.status);
}

void HttpServer::generate(const HttpRequest& req, HttpResponse& res, Endpoint ep) {
  const bool anthropic = ep == Endpoint::kMessages;
  if (draining_) return send_error(res, 503, "the server is shutting down", {}, anthropic);
  auto live = std::make_shared<Live>();
  live->api = ep;
  try {
    const OJson body = parse_request_json(req.wire.body, opt_.json_limits());
    live->job = ep == Endpoint::kChat        ? parse_chat_request(body, model_, opt_.limits)
                : ep == Endpoint::kMessages  ? parse_messages_request(body, model_, opt_.limits)
                : ep == Endpoint::kResponses ? parse_responses_request(body, model_, opt_.limits, live->responses_echo)
                                             : parse_completion_request(body, model_, opt_.limits);
    if (metrics_.in_flight.fetch_add(1) >= opt_.max_in_flight) {
      metrics_.in_flight--;
      return send_error(
          res, 429, fmt::format("the server is at its limit of {} requests in flight; retry later", opt_.max_in_flight),
          {}, anthropic);
    }
    live->metrics = &metrics_;
    const bool responses = ep == Endpoint::kResponses;
    const std::string id = next_id(ep == Endpoint::kChat ? "chatcmpl"
                                   : anthropic           ? "msg"
                                   : responses           ? "resp"
                                                         : "cmpl");
    // Anthropic's ids are msg_..., the Responses API's resp_...; the engine request and the
    // tool-call ids keep the dashed form.
    live->meta.id = anthropic ? "msg_" + id.substr(4) : responses ? "resp_" + id.substr(5) : id;
    live->meta.model = model_.id;
    live->meta.created = now_unix();
    live->gen = std::make_unique<Generation>(*engine_, model_, live->job, id, &metrics_);
    live->accum.resize(static_cast<size_t>(live->gen->num_choices()));
    if (anthropic) live->messages.emplace(live->meta, static_cast<int64_t>(live->job.prompts[0].size()));
    if (responses && live->job.stream) live->responses.emplace(live->meta, live->responses_echo);
  } catch (const ApiError& e) {
    return send_error(res, e.status(), e.what(), e.param(), anthropic, e.code());
  } catch (const core::Error& e) {
    return send_error(res, 400, excerpt(e.what(), 2000), {}, anthropic);
  }
  if (!live->job.stream) {
    // The status line waits for the outcome: 200 only with the completion, 503 or 500 with an
    // OpenAI error when shutdown or an engine failure cut the request. (Writing anything earlier,
    // e.g. whitespace to find out whether the client is still there, would commit a 200 that an
    // error body then follows, which SDKs read as a completion.) A client that gave up is noticed
    // on its socket instead, and its request aborted (pain_points.md A16).
    ClientConnection client(req.fd);
    while (run_non_stream(*live, std::chrono::steady_clock::now() + std::chrono::milliseconds(250))) {
      if (client.closed()) {
        live->gen->abort();
        // Never delivered; the status is what the error counter and the access log see.
        return send_error(res, 499, "the client closed the connection before the answer", {}, anthropic);
      }
    }
    if (abort_all_) return send_error(res, 503, "the server shut down before the request finished", {}, anthropic);
    if (live->gen->engine_failed()) {
      on_engine_failure("the engine failed a step");
      return send_error(res, 500, "the engine failed while generating this request", {}, anthropic);
    }
    res.set_content(non_stream_body(*live), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.content_type = "text/event-stream";
  res.stream = [this, live](ResponseSink& sink) {
    try {
      return stream_step(*live, sink);
    } catch (const std::exception& e) {
      // Never leave a stream without its end: an error event (then [DONE] on the chat and
      // completions routes).
      spdlog::error("stream failed: {}", e.what());
      live->gen->abort();
      sink.write(stream_error(live->api, 500, e.what(), &live->responses));
      live->finished = true;
      sink.done();
      return true;
    }
  };
}

}  // namespace tessera::server
