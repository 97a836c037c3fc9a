// The HTTP front: routes, API-key check, admission control, SSE streaming and graceful shutdown.
// Every handler converts whatever goes wrong into an OpenAI error object (an Anthropic one on
// /v1/messages); nothing a client sends reaches the engine without validation.
//
// Life of a server: it answers as soon as it is bound, before the model is loaded (the loading is
// not its business: cli/ loads and hands over the engine with set_engine()). Liveness (/livez) is
// 200 whenever it answers HTTP; readiness (/health, /readyz) is 503 "loading" with the load's
// progress, then 200 "ok", then 503 again while draining at shutdown or after the engine failed.
// Until it is ready every /v1 route answers 503 with an OpenAI error and Retry-After.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "server/cors.h"
#include "server/http_listener.h"
#include "server/json_guard.h"
#include "server/load_status.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/served_model.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::bind)
  std::string api_key;
  CorsPolicy cors;  // --allowed-origins; none by default
  size_t max_body_bytes = 8u << 20;
  int64_t max_in_flight = 256;  // admitted generation requests; more get 429 + Retry-After
  // HTTP worker threads; each request being answered holds one (connections that are idle or
  // still sending their request hold none: see http_listener.h). 0: max_in_flight + 32, so
  // /health and /metrics are answered even when every admission slot is taken.
  int threads = 0;
  // The listener's limits (docs/SERVER.md "Limits"): request headers, connections, bodies being
  // received at once, and the per-phase deadlines.
  size_t max_header_bytes = 16u << 10;
  size_t max_connections = 4096;
  size_t max_buffered_body_bytes = 256u << 20;
  double idle_timeout_s = 30, header_timeout_s = 10, body_timeout_s = 60, write_timeout_s = 30;
  JsonLimits json;  // nesting and object size of a request body's JSON (json_guard.h)
  ParseLimits limits;
  const JsonLimits& json_limits() const { return json; }
  double stall_seconds = 60;  // engine with work but no finished step for this long: unhealthy
};

class HttpServer {
 public:
  // A server that is not ready yet: it has `model`'s name, tokenizer and templates but no engine.
  HttpServer(const ServedModel& model, ServerOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port (useful with port 0).
  int bind();
  // Serves until shutdown() or stop_listening(); returns false when the listener failed.
  bool run();
  // The model is loaded: requests go to `engine` (started, and outliving this server) from now on
  // and readiness turns 200 (unless shutdown began meanwhile). Watches the engine thread: if it
  // dies, the server fails as on a failed step. Safe from any thread; once.
  void set_engine(engine::Engine& engine);
  // Where the loading thread reports its progress while the server is not ready.
  LoadStatus& load_status() { return load_; }
  bool ready() const { return engine_ready_.load(); }
  // Stops the listener now, without draining (nothing to drain before set_engine: the load failed);
  // run() returns. Safe from any thread, before or during run().
  void stop_listening();
  // Stops admitting requests (new ones get 503), waits up to `grace_seconds` for in-flight ones,
  // aborts the rest, then stops the listener. Blocks; safe to call from any thread.
  void shutdown(double grace_seconds);
  // shutdown() on a thread of the server's own (joined by the destructor); returns at once.
  void request_shutdown(double grace_seconds);
  // Ready (the engine is set), accepting requests, no fatal engine error, and the engine made
  // progress within the last `stall_seconds` whenever it had work.
  bool healthy();
  // The engine failed (a step's forward pass, or its thread died): the server shuts down and the
  // process exits non-zero.
  bool fatal() const { return fatal_.load(); }
  ServerMetrics& metrics() { return metrics_; }

 private:
  struct Live;
  // Every request the listener hands over: routing, API key, the loading state.
  void handle(const HttpRequest& req, HttpResponse& res);
  void generate(const HttpRequest& req, HttpResponse& res, Endpoint ep);
  // One call of an SSE response's content provider: writes what the generation produced since.
  bool stream_step(Live& l, ResponseSink& sink);
  // Polls a non-streamed request until it is done (false) or `until` passed (true).
  bool run_non_stream(Live& l, std::chrono::steady_clock::time_point until);
  std::string non_stream_body(Live& l);
  std::string next_id(const char* prefix);
  void on_engine_failure(const std::string& why);
  // /health and /readyz: 200 {"status":"ok"} or 503 {"status":"loading"|"draining"|"failed"|...}.
  void readiness(HttpResponse& res);

  engine::Engine* engine_ = nullptr;  // set once by set_engine, before engine_ready_
  std::atomic<bool> engine_ready_{false};
  const ServedModel& model_;
  ServerOptions opt_;
  std::unique_ptr<HttpListener> http_;
  ServerMetrics metrics_;
  LoadStatus load_;
  std::atomic<bool> draining_{false}, abort_all_{false}, fatal_{false};
  std::mutex fatal_mutex_;
  std::string fatal_reason_;
  std::mutex shutdown_mutex_;
  std::thread shutdown_thread_;
  std::mutex health_mutex_;
  int64_t last_steps_ = -1;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::atomic<uint64_t> counter_{0};
  int64_t created_ = 0;
};

}  // namespace tessera::server
