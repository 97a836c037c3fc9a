// The HTTP/1.1 listener: one event-loop thread (epoll) owns every connection while it is idle or
// sending its request, and hands only complete, validated requests to a pool of worker threads,
// which run the handler and write the response.
//
// Why not cpp-httplib (0.11, Debian 12's, which served before): it gives each connection a thread
// from a fixed pool for the connection's whole life, reading the request line, the headers, the
// body and waiting between keep-alive requests with blocking reads on that thread. 300 clients
// sending headers slowly, or 1000 idle keep-alive connections, then hold every thread and /health
// waits behind them; its read timeout restarts with every byte, so a client trickling a byte a
// second is never cut; its limits are checked after buffering (a 200 MB chunked body was kept
// whole) and its form-body limit answered the README's own `curl -d @body.json` with 413. None of
// that can be configured away: the thread is taken before the first byte is read. Wrapping it
// (a front that reads and validates a request and then passes the socket on) does not work either,
// since cpp-httplib reads the request from the socket itself and there is no way to give it bytes
// that were already read. So the listener is replaced; cpp-httplib stays only as the tests' client.
//
// Cost of a connection that has not sent a complete request: one descriptor, a parser and the
// bytes it sent (at most the header limit, then the body limit; all bodies being received
// together at most `max_buffered_body_bytes`). Per-phase deadlines, each fixed when the phase
// starts and not extended by progress: `idle_timeout` (keep-alive, waiting for a request's first
// byte), `header_timeout` (first byte to the end of the headers), `body_timeout` (the body), and
// `write_timeout` (no byte of the response accepted by the client for that long). At the
// connection cap the connection that has waited longest without a complete request is closed to
// make room, so a flood of slow clients cannot lock well-behaved ones out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/http_wire.h"

namespace tessera::server {

// Where a streamed (chunked) response writes.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // False when the client is gone or accepted nothing for the write timeout (stop generating).
  virtual bool write(std::string_view data) = 0;
  // The stream is complete (the terminating chunk is sent after the provider returns).
  void done() { done_ = true; }
  bool is_done() const { return done_; }

 private:
  bool done_ = false;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/-Length
  std::string content_type = "application/json";
  std::string body;
  // A streamed response: called on the worker until it returns false (the connection is then
  // closed) or has called sink.done().
  std::function<bool(ResponseSink&)> stream;

  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
  void set_header(const std::string& name, std::string value);  // replaces a header of that name
  void erase_header(const std::string& name);
};

struct HttpRequest {
  WireRequest wire;  // method, path, headers, body
  // The connection's socket, the listener's while the handler runs (for noticing a client that
  // left: see ClientConnection).
  int fd = -1;
};

struct ListenerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  WireLimits limits;
  int workers = 64;
  size_t max_connections = 4096;
  size_t max_buffered_body_bytes = 256u << 20;  // bodies being received, all connections together
  double idle_timeout_s = 30;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double write_timeout_s = 30;
};

class HttpListener {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // The body of an error the listener answers itself (framing, timeouts, overload).
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  HttpListener(ListenerOptions options, Handler handler, ErrorBody error_body);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens; returns the port. Throws core::Error when it cannot.
  int bind();
  // Runs the event loop on this thread until stop(); false when it could not run.
  bool run();
  // Stops accepting and reading, closes connections without a request in a handler and makes
  // workers' writes give up; run() returns once the workers finished their handlers. Any thread.
  void stop();
  bool running() const { return running_.load(); }
  size_t connections() const { return num_conns_.load(); }

 private:
  struct Conn;
  void loop();
  void accept_all();
  void on_readable(Conn& c);
  // Feeds bytes to the connection's parser: false once the request was dispatched or refused.
  bool process(Conn& c, const char* data, size_t n);
  void after_feed(Conn& c, size_t before_body);
  void dispatch(Conn& c);
  void refuse(Conn& c, int status, const std::string& message, bool retry_after = false);
  void close_conn(int fd);
  void expire(std::chrono::steady_clock::time_point now);
  void take_back();
  bool evict_one();
  void worker();
  void serve(Conn& c);
  bool write_all(int fd, std::string_view data);

  ListenerOptions opt_;
  Handler handler_;
  ErrorBody error_body_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, spare_fd_ = -1;
  std::atomic<bool> stopping_{false}, running_{false};
  std::atomic<size_t> num_conns_{0};
  std::atomic<int64_t> buffered_{0};                      // body bytes held by connections still receiving
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;  // loop thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Conn*> ready_;      // complete requests for the workers
  std::vector<Conn*> returned_;  // connections the workers are done with
  std::vector<std::thread> workers_;
};

}  // namespace tessera::server
