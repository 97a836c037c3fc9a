#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/http_live.h"
#include "server/response_json.h"

namespace tessera::server {
namespace {

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {}) {
  res.status = status;
  res.set_content(dump(error_json(status, message, param)), kJson);
  if (status == 429 || status == 503) res.set_header("Retry-After", "1");
}

// Compares in time independent of where the strings differ (API keys).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

HttpServer::HttpServer(engine::Engine& engine, const ServedModel& model, ServerOptions options)
    : engine_(engine), model_(model), opt_(std::move(options)), http_(std::make_unique<httplib::Server>()),
      created_(now_unix()) {
  const int threads = opt_.threads > 0 ? opt_.threads : static_cast<int>(opt_.max_in_flight) + 32;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  setup_routes();
}

HttpServer::~HttpServer() {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shutdown_thread_.joinable()) shutdown_thread_.join();
}

void HttpServer::request_shutdown(double grace_seconds) {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shutdown_thread_.joinable()) return;
  shutdown_thread_ = std::thread([this, grace_seconds] { shutdown(grace_seconds); });
}

void HttpServer::on_engine_failure() {
  if (fatal_.exchange(true)) return;
  spdlog::error("the engine failed a step: shutting down (exit status 1)");
  request_shutdown(5);
}

bool HttpServer::healthy() {
  if (draining_.load() || fatal_.load()) return false;
  const engine::EngineMetrics m = engine_.metrics();
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
  // cpp-httplib listens with a backlog of 5 (compiled into the Debian library): a burst of
  // clients connecting at once would overflow it and see resets. Remember the socket and listen
  // again with the system's maximum, which Linux applies to a listening socket.
  int fd = -1;
  http_->set_socket_options([&fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    fd = sock;
  });
  if (opt_.port == 0) {
    const int p = http_->bind_to_any_port(opt_.host);
    if (p <= 0) core::fail("serve: cannot bind {} on any port", opt_.host);
    opt_.port = p;
  } else if (!http_->bind_to_port(opt_.host, opt_.port)) {
    core::fail("serve: cannot bind {}:{} (in use?)", opt_.host, opt_.port);
  }
  if (fd >= 0 && ::listen(fd, SOMAXCONN) != 0) spdlog::warn("serve: could not raise the listen backlog");
  return opt_.port;
}

bool HttpServer::run() { return http_->listen_after_bind(); }

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
  http_->stop();
}

void HttpServer::setup_routes() {
  auto& s = *http_;

  // Fills the OpenAI error body for errors httplib produces itself (404 route, 413 body too large)
  // and counts every error response by status.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    metrics_.count_error(res.status);
    if (res.body.empty()) {
      if (res.status == 413)
        send_error(res, 413, fmt::format("the request body exceeds {} bytes", opt_.max_body_bytes));
      else if (res.status == 404)
        send_error(res, 404, fmt::format("no route for {} {}", req.method, req.path));
      else
        send_error(res, res.status, fmt::format("HTTP error {}", res.status));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("request failed: {}", what);
    send_error(res, 500, what);
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (!same_secret(auth, "Bearer " + opt_.api_key)) {
      send_error(res, 401, "a valid API key is required: send 'Authorization: Bearer <key>'");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (healthy()) res.set_content("{\"status\":\"ok\"}", kJson);
    else send_error(res, 503, fatal_ ? "the engine failed" : draining_ ? "the server is shutting down"
                                                                     : "the engine has made no progress");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.metrics(), healthy()), "text/plain; version=0.0.4");
  });
  auto model_card = [this] {
    return OJson{{"id", model_.id},
                 {"object", "model"},
                 {"created", created_},
                 {"owned_by", model_.random_weights ? "tessera (demo, random weights)" : model_.owned_by},
                 {"root", model_.id},
                 {"max_model_len", model_.max_model_len},
                 {"random_weights", model_.random_weights}};
  };
  s.Get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(OJson{{"object", "list"}, {"data", OJson::array({model_card()})}}), kJson);
  });
  s.Get(R"(/v1/models/(.+))", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != model_.id) return send_error(res, 404, fmt::format("The model '{}' does not exist", std::string(req.matches[1])), "model");
    res.set_content(dump(model_card()), kJson);
  });

  auto generate = [this](const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    if (draining_) return send_error(res, 503, "the server is shutting down");
    auto live = std::make_shared<Live>();
    try {
      OJson body;
      try {
        body = OJson::parse(req.body);
      } catch (const nlohmann::json::exception& e) {
        return send_error(res, 400, fmt::format("the body is not valid JSON: {}", e.what()));
      }
      live->job = ep == Endpoint::kChat ? parse_chat_request(body, model_, opt_.limits)
                                        : parse_completion_request(body, model_, opt_.limits);
      if (metrics_.in_flight.fetch_add(1) >= opt_.max_in_flight) {
        metrics_.in_flight--;
        return send_error(res, 429, fmt::format("the server is at its limit of {} requests in flight; retry later", opt_.max_in_flight));
      }
      live->metrics = &metrics_;
      live->meta.id = next_id(ep == Endpoint::kChat ? "chatcmpl" : "cmpl");
      live->meta.model = model_.id;
      live->meta.created = now_unix();
      live->gen = std::make_unique<Generation>(engine_, model_, live->job, live->meta.id, &metrics_);
      live->accum.resize(static_cast<size_t>(live->gen->num_choices()));
    } catch (const ApiError& e) {
      return send_error(res, e.status(), e.what(), e.param());
    } catch (const core::Error& e) {
      return send_error(res, 400, e.what());
    }
    const bool chat = ep == Endpoint::kChat;
    if (!live->job.stream) {
      // Most requests finish within the first second and get an ordinary response. Longer ones
      // switch to a chunked body that sends a space (leading JSON whitespace) every second: the
      // HTTP library reports a vanished client only when a write fails, and a non-streamed
      // request whose client gave up must be aborted too (shared/reference/pain_points.md, A16:
      // request cancellation and client disconnect).
      const auto inline_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (!run_non_stream(*live, inline_deadline)) {
        if (abort_all_) return send_error(res, 503, "the server shut down before the request finished");
        if (live->gen->engine_failed()) {
          on_engine_failure();
          return send_error(res, 500, "the engine failed while generating this request");
        }
        res.set_content(non_stream_body(*live, chat), kJson);
        return;
      }
      res.set_chunked_content_provider(kJson, [this, live, chat](size_t, httplib::DataSink& sink) {
        try {
          if (live->finished) return false;
          if (run_non_stream(*live, std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
            if (!sink.write(" ", 1)) {
              metrics_.count_error(499);
              live->gen->abort();
              return false;
            }
            return true;
          }
          std::string body;
          if (abort_all_) {
            body = dump(error_json(503, "the server shut down before the request finished"));
          } else if (live->gen->engine_failed()) {
            on_engine_failure();
            body = dump(error_json(500, "the engine failed while generating this request"));
          } else {
            body = non_stream_body(*live, chat);
          }
          sink.write(body.data(), body.size());
        } catch (const std::exception& e) {
          live->gen->abort();
          const std::string body = dump(error_json(500, e.what()));
          sink.write(body.data(), body.size());
        }
        live->finished = true;
        sink.done();
        return true;
      });
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, live, chat](size_t, httplib::DataSink& sink) {
      try {
        return stream_step(*live, chat, sink);
      } catch (const std::exception& e) {
        // Never leave a stream without its end: an error event, then [DONE].
        spdlog::error("stream failed: {}", e.what());
        live->gen->abort();
        const std::string ev = sse(error_json(500, e.what())) + "data: [DONE]\n\n";
        sink.write(ev.data(), ev.size());
        live->finished = true;
        sink.done();
        return true;
      }
    });
  };
  s.Post("/v1/chat/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kChat);
  });
  s.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kCompletion);
  });
}

}  // namespace tessera::server
