// The HTTP front: routes, API-key check, admission control, SSE streaming and graceful shutdown.
// Every handler converts whatever goes wrong into an OpenAI error object; nothing a client sends
// reaches the engine without validation.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <chrono>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/served_model.h"

namespace httplib {
class Server;
class DataSink;
}

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::bind)
  std::string api_key;
  size_t max_body_bytes = 8u << 20;
  int64_t max_in_flight = 256;  // admitted generation requests; more get 429 + Retry-After
  // HTTP worker threads; each open request holds one. 0: max_in_flight + 32, so /health and
  // /metrics are answered even when every admission slot is taken.
  int threads = 0;
  ParseLimits limits;
  double stall_seconds = 60;  // engine with work but no finished step for this long: unhealthy
};

class HttpServer {
 public:
  HttpServer(engine::Engine& engine, const ServedModel& model, ServerOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port (useful with port 0).
  int bind();
  // Serves until shutdown(); returns false when the listener failed.
  bool run();
  // Stops admitting requests (new ones get 503), waits up to `grace_seconds` for in-flight ones,
  // aborts the rest, then stops the listener. Blocks; safe to call from any thread.
  void shutdown(double grace_seconds);
  // shutdown() on a thread of the server's own (joined by the destructor); returns at once.
  void request_shutdown(double grace_seconds);
  // Accepting requests, no fatal engine error, and the engine made progress within the last
  // `stall_seconds` whenever it had work.
  bool healthy();
  // An engine step failed (its requests were aborted): the server shuts down and exits non-zero.
  bool fatal() const { return fatal_.load(); }
  ServerMetrics& metrics() { return metrics_; }

 private:
  struct Live;
  void setup_routes();
  // One call of an SSE response's content provider: writes what the generation produced since.
  bool stream_step(Live& l, bool chat, httplib::DataSink& sink);
  // Polls a non-streamed request until it is done (false) or `until` passed (true).
  bool run_non_stream(Live& l, std::chrono::steady_clock::time_point until);
  std::string non_stream_body(Live& l, bool chat);
  std::string next_id(const char* prefix);
  void on_engine_failure();

  engine::Engine& engine_;
  const ServedModel& model_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  ServerMetrics metrics_;
  std::atomic<bool> draining_{false}, abort_all_{false}, fatal_{false};
  std::mutex shutdown_mutex_;
  std::thread shutdown_thread_;
  std::mutex health_mutex_;
  int64_t last_steps_ = -1;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::atomic<uint64_t> counter_{0};
  int64_t created_ = 0;
};

}  // namespace tessera::server
