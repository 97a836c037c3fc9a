#include "server/http_listener.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace tessera::server {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

// A refused request's connection is kept this long (reading and dropping what the client still
// sends) before it is closed, so that the client reads the error instead of a reset.
constexpr double kLingerSeconds = 2;
constexpr int64_t kLingerMaxBytes = 64 << 20;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kReadPerEvent = 256 << 10;  // fairness: one connection's bytes per wake-up

}  // namespace

void HttpResponse::set_header(const std::string& name, std::string value) {
  erase_header(name);
  headers.emplace_back(name, std::move(value));
}

void HttpResponse::erase_header(const std::string& name) {
  headers.erase(std::remove_if(headers.begin(), headers.end(),
                               [&](const auto& h) { return strcasecmp(h.first.c_str(), name.c_str()) == 0; }),
                headers.end());
}

struct HttpListener::Conn {
  enum class Phase { kWaiting, kReading, kBusy, kLinger };
  explicit Conn(int f, const WireLimits& lim) : fd(f), parser(lim) {}
  int fd;
  RequestParser parser;
  Phase phase = Phase::kWaiting;
  Clock::time_point deadline, since;
  bool body_phase = false;
  int64_t held = 0;         // body bytes counted in buffered_
  int64_t discarded = 0;    // lingering
  std::string pending;      // bytes read past the end of the request (pipelining)
  bool keep_alive = false;  // set by the worker
  int64_t requests = 0;     // answered on this connection
};

HttpListener::HttpListener(ListenerOptions options, Handler handler, ErrorBody error_body)
    : opt_(std::move(options)), handler_(std::move(handler)), error_body_(std::move(error_body)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  TESSERA_CHECK(wake_fd_ >= 0 && epoll_fd_ >= 0, "serve: cannot create the event loop: {}", std::strerror(errno));
}

HttpListener::~HttpListener() {
  stop();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  for (auto& [fd, c] : conns_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_, spare_fd_})
    if (fd >= 0) ::close(fd);
}

int HttpListener::bind() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(opt_.port);
  if (const int rc = ::getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    core::fail("serve: cannot resolve '{}': {}", opt_.host, ::gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) core::fail("serve: cannot listen on {}:{} ({})", opt_.host, opt_.port, why);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  opt_.port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return opt_.port;
}

void HttpListener::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

bool HttpListener::run() {
  if (listen_fd_ < 0) return false;
  if (stopping_) return true;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (int i = 0; i < std::max(1, opt_.workers); ++i) workers_.emplace_back([this] { worker(); });
  running_ = true;
  loop();
  running_ = false;
  ::close(listen_fd_);
  listen_fd_ = -1;
  cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  take_back();  // closes what the workers returned
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  num_conns_ = 0;
  return true;
}

void HttpListener::loop() {
  std::array<epoll_event, 256> events{};
  auto last_scan = Clock::now();
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    if (n < 0 && errno != EINTR) {
      spdlog::error("serve: epoll_wait failed: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n && !stopping_; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listen_fd_) {
        accept_all();
      } else if (fd == wake_fd_) {
        uint64_t v = 0;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof(v));
        take_back();
      } else if (auto it = conns_.find(fd); it != conns_.end() && it->second->phase != Conn::Phase::kBusy) {
        on_readable(*it->second);
      }
    }
    const auto now = Clock::now();
    if (now - last_scan >= std::chrono::milliseconds(100)) {
      last_scan = now;
      expire(now);
    }
  }
}

void HttpListener::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: make room for later and take this one off the backlog (closing it),
        // or the level-triggered listener would wake the loop forever.
        evict_one();
        if (spare_fd_ >= 0) {
          ::close(spare_fd_);
          const int drop = ::accept(listen_fd_, nullptr, nullptr);
          if (drop >= 0) ::close(drop);
          spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        spdlog::warn("serve: out of file descriptors with {} connections open (raise `ulimit -n`)", conns_.size());
      }
      return;
    }
    if (conns_.size() >= opt_.max_connections && !evict_one()) {
      ::close(fd);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>(fd, opt_.limits);
    c->since = Clock::now();
    c->deadline = c->since + seconds(opt_.header_timeout_s);  // a new client sends its request at once
    conns_[fd] = std::move(c);
    num_conns_ = conns_.size();
  }
}

bool HttpListener::evict_one() {
  Conn* oldest = nullptr;
  for (auto& [fd, c] : conns_)
    if (c->phase != Conn::Phase::kBusy && (!oldest || c->since < oldest->since)) oldest = c.get();
  if (!oldest) return false;
  close_conn(oldest->fd);
  return true;
}

void HttpListener::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  buffered_ -= it->second->held;
  if (it->second->phase != Conn::Phase::kBusy) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(it);
  num_conns_ = conns_.size();
}

void HttpListener::on_readable(Conn& c) {
  std::array<char, kReadChunk> buf;
  size_t total = 0;
  const int fd = c.fd;
  while (total < kReadPerEvent) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n == 0) return close_conn(fd);  // the client closed (nobody to answer)
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return close_conn(fd);
    }
    total += static_cast<size_t>(n);
    if (c.phase == Conn::Phase::kLinger) {
      c.discarded += n;
      if (c.discarded > kLingerMaxBytes) return close_conn(fd);
      continue;
    }
    if (!process(c, buf.data(), static_cast<size_t>(n))) return;
  }
}

bool HttpListener::process(Conn& c, const char* data, size_t n) {
  const int fd = c.fd;
  size_t used = 0;
  while (used < n) {
    const bool was_idle = c.parser.state() == RequestParser::State::kIdle;
    const size_t before = c.parser.request().body.size();
    const size_t k = c.parser.feed(data + used, n - used);
    used += k;
    if (was_idle && c.parser.state() != RequestParser::State::kIdle) {
      c.phase = Conn::Phase::kReading;
      // The header deadline runs from the request's first byte (from the accept for a new one).
      if (c.requests > 0) c.deadline = Clock::now() + seconds(opt_.header_timeout_s);
    }
    after_feed(c, before);
    if (conns_.find(fd) == conns_.end() || c.phase == Conn::Phase::kLinger) return false;  // refused
    if (c.parser.done()) {
      c.pending.assign(data + used, n - used);
      dispatch(c);
      return false;
    }
    if (k == 0 && used < n) {  // cannot happen: an unfinished request takes every byte
      refuse(c, 400, "malformed request");
      return false;
    }
  }
  return true;
}

void HttpListener::after_feed(Conn& c, size_t before) {
  if (c.phase == Conn::Phase::kWaiting || c.phase == Conn::Phase::kReading) {
    const size_t now_size = c.parser.request().body.size();
    if (now_size > before) {
      const auto delta = static_cast<int64_t>(now_size - before);
      c.held += delta;
      if (buffered_.fetch_add(delta) + delta > static_cast<int64_t>(opt_.max_buffered_body_bytes))
        return refuse(c, 503,
                      fmt::format("the server is receiving more than {} bytes of request bodies at once; retry later",
                                  opt_.max_buffered_body_bytes),
                      true);
    }
    if (c.parser.failed()) return refuse(c, c.parser.error_status(), c.parser.error_message());
    if (c.parser.awaiting_body() && !c.body_phase) {
      c.body_phase = true;
      c.deadline = Clock::now() + seconds(opt_.body_timeout_s);
      if (c.parser.request().expect_continue) {
        static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] const ssize_t w = ::send(c.fd, k100.data(), k100.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    }
  }
}

void HttpListener::dispatch(Conn& c) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  buffered_ -= c.held;
  c.held = 0;
  c.phase = Conn::Phase::kBusy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(&c);
  }
  cv_.notify_one();
}

void HttpListener::refuse(Conn& c, int status, const std::string& message, bool retry_after) {
  const std::string body = error_body_ ? error_body_(status, message) : message;
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n", status,
      reason_phrase(status), body.size(), retry_after ? "Retry-After: 1\r\n" : "");
  out += body;
  // Small: fits an empty socket buffer; a client that does not read it loses nothing it asked for.
  [[maybe_unused]] const ssize_t w = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(c.fd, SHUT_WR);
  buffered_ -= c.held;
  c.held = 0;
  c.parser.reset();
  c.parser = RequestParser(opt_.limits);
  c.phase = Conn::Phase::kLinger;
  c.deadline = Clock::now() + seconds(kLingerSeconds);
}

void HttpListener::expire(Clock::time_point now) {
  std::vector<Conn*> due;
  for (auto& [fd, c] : conns_)
    if (c->phase != Conn::Phase::kBusy && c->deadline <= now) due.push_back(c.get());
  for (Conn* c : due) {
    if (c->phase == Conn::Phase::kReading && c->parser.state() != RequestParser::State::kIdle) {
      refuse(*c, 408,
             c->body_phase ? fmt::format("the request body did not arrive within {:g} s", opt_.body_timeout_s)
                           : fmt::format("the request headers did not arrive within {:g} s", opt_.header_timeout_s));
      c->deadline = now + seconds(kLingerSeconds);
    } else {
      close_conn(c->fd);  // idle keep-alive, a new connection that sent nothing, or done lingering
    }
  }
}

void HttpListener::take_back() {
  std::vector<Conn*> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    back.swap(returned_);
  }
  for (Conn* c : back) {
    if (stopping_ || !c->keep_alive) {
      c->phase = Conn::Phase::kWaiting;  // not in epoll any more: close_conn must not remove it
      ::close(c->fd);
      const int fd = c->fd;
      conns_.erase(fd);
      num_conns_ = conns_.size();
      continue;
    }
    c->phase = Conn::Phase::kWaiting;
    c->body_phase = false;
    c->since = Clock::now();
    c->deadline = c->since + seconds(opt_.idle_timeout_s);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c->fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      ::close(c->fd);
      conns_.erase(c->fd);
      num_conns_ = conns_.size();
      continue;
    }
    if (!c->pending.empty()) {
      // A pipelined request already read: parse it as if it had just arrived.
      const std::string p = std::move(c->pending);
      c->pending.clear();
      process(*c, p.data(), p.size());
    }
  }
}

void HttpListener::worker() {
  for (;;) {
    Conn* c = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !ready_.empty() || stopping_; });
      if (ready_.empty() || (stopping_ && !running_)) return;
      c = ready_.front();
      ready_.pop_front();
    }
    serve(*c);
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.push_back(c);
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

bool HttpListener::write_all(int fd, std::string_view data) {
  auto last_progress = Clock::now();
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      last_progress = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (stopping_ && !running_) return false;
    if (Clock::now() - last_progress > seconds(opt_.write_timeout_s)) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, 100);
  }
  return true;
}

namespace {

class SocketSink : public ResponseSink {
 public:
  SocketSink(std::function<bool(std::string_view)> write, bool chunked) : write_(std::move(write)), chunked_(chunked) {}
  bool write(std::string_view data) override {
    if (failed_) return false;
    if (data.empty()) return true;
    if (chunked_) {
      std::string frame = fmt::format("{:x}\r\n", data.size());
      frame.append(data);
      frame += "\r\n";
      failed_ = !write_(frame);
    } else {
      failed_ = !write_(data);
    }
    return !failed_;
  }
  bool failed() const { return failed_; }

 private:
  std::function<bool(std::string_view)> write_;
  bool chunked_;
  bool failed_ = false;
};

}  // namespace

void HttpListener::serve(Conn& c) {
  HttpRequest req;
  req.wire = c.parser.take();
  req.fd = c.fd;
  HttpResponse res;
  try {
    handler_(req, res);
  } catch (const std::exception& e) {
    res = HttpResponse{};
    res.status = 500;
    res.body = error_body_ ? error_body_(500, e.what()) : e.what();
  }
  const bool head = req.wire.method == "HEAD";
  const bool http11 = req.wire.minor_version == 1;
  bool keep = req.wire.keep_alive && !stopping_;
  const bool streamed = static_cast<bool>(res.stream);
  if (streamed && !http11) keep = false;  // an HTTP/1.0 stream ends when the connection does
  // 204 No Content has neither a body nor its headers (RFC 9110 §8.6): CORS preflights, OPTIONS.
  const bool no_content = res.status == 204 && !streamed;
  if (no_content) res.body.clear();
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
  if (!no_content) out += fmt::format("Content-Type: {}\r\n", res.content_type);
  if (streamed) {
    if (http11) out += "Transfer-Encoding: chunked\r\n";
  } else if (!no_content) {
    out += fmt::format("Content-Length: {}\r\n", res.body.size());
  }
  for (const auto& [k, v] : res.headers) out += fmt::format("{}: {}\r\n", k, v);
  out += keep ? (http11 ? "" : "Connection: keep-alive\r\n") : "Connection: close\r\n";
  out += "\r\n";
  bool ok = true;
  const size_t body_size = res.body.size();
  if (!streamed) {
    if (!head && res.body.size() <= (64u << 10)) {
      out += res.body;
      ok = write_all(c.fd, out);
    } else {
      ok = write_all(c.fd, out) && (head || write_all(c.fd, res.body));
    }
  } else if ((ok = write_all(c.fd, out))) {
    SocketSink sink([this, fd = c.fd](std::string_view d) { return write_all(fd, d); }, http11);
    while (!sink.is_done()) {
      if (!res.stream(sink) || sink.failed()) {
        ok = false;
        break;
      }
    }
    if (ok && http11) ok = write_all(c.fd, "0\r\n\r\n");
  }
  res = HttpResponse{};
  req = HttpRequest{};
  // A large answer (logprobs of many choices) leaves freed heap that glibc keeps: give it back.
  if (body_size > (1u << 20)) ::malloc_trim(0);
  c.keep_alive = ok && keep;
  ++c.requests;
}

}  // namespace tessera::server
