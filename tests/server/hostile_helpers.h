// Raw-socket helpers for the hostile-input tests: send exactly the bytes an attacker would (no
// HTTP library fixes them up), read what comes back with a deadline, and look at the server's RSS.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tessera::test {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A connected loopback socket (blocking), or -1.
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  return fd;
}

// Sends all of `data`; false when the peer closed or reset (or `timeout_s` passed).
inline bool send_all(int fd, std::string_view data, double timeout_s = 10) {
  const auto t0 = Clock::now();
  while (!data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) {
      if (seconds_since(t0) > timeout_s) return false;
      continue;
    }
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

struct RawResponse {
  int status = 0;  // 0: nothing (or no status line) before the deadline / close
  std::string head, body;
  bool closed = false;  // the server closed the connection after the response
  double seconds = 0;   // until the response was complete
  std::string header(const std::string& name) const {
    std::string h = head;
    for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string n = "\r\n" + name + ":";
    for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t p = h.find(n);
    if (p == std::string::npos) return "";
    const size_t b = head.find_first_not_of(' ', p + n.size());
    return head.substr(b, head.find("\r\n", b) - b);
  }
};

// Reads one response (Content-Length or chunked body, or until close) within `timeout_s`; skips
// a "100 Continue". With `wait_close`, then waits for the server to close. Bytes read past the
// response (the next pipelined response) are left in `*carry` for the next call.
inline RawResponse read_response(int fd, double timeout_s, bool wait_close = false, std::string* carry = nullptr) {
  RawResponse r;
  const auto t0 = Clock::now();
  std::string buf;
  if (carry) buf.swap(*carry);
  bool eof = false;
  auto fill = [&]() -> bool {
    const double left = timeout_s - seconds_since(t0);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) {
      eof = true;
      return false;
    }
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  };
  for (;;) {
    size_t end = buf.find("\r\n\r\n");
    while (end == std::string::npos) {
      if (!fill()) {
        r.closed = eof;
        return r;
      }
      end = buf.find("\r\n\r\n");
    }
    r.head = buf.substr(0, end + 2);
    buf.erase(0, end + 4);
    if (r.head.rfind("HTTP/1.", 0) != 0 || r.head.size() < 12) {
      r.closed = eof;
      return r;
    }
    r.status = std::stoi(r.head.substr(9, 3));
    if (r.status != 100) break;
  }
  const std::string cl = r.header("Content-Length");
  if (!cl.empty()) {
    const size_t len = std::stoul(cl);
    while (buf.size() < len && fill()) {
    }
    r.body = buf.substr(0, std::min(len, buf.size()));
    buf.erase(0, r.body.size());
  } else if (r.header("Transfer-Encoding") == "chunked") {
    while (buf.find("\r\n0\r\n\r\n") == std::string::npos && buf.rfind("0\r\n\r\n", 0) != 0 && fill()) {
    }
    r.body = buf;  // raw chunked framing
    buf.clear();
  } else {
    while (fill()) {
    }
    r.body = buf;
  }
  r.seconds = seconds_since(t0);
  if (carry) *carry = buf;
  if (wait_close) {
    while (!eof && fill()) {
    }
  }
  r.closed = eof;
  return r;
}

// Resident set of a process, in bytes (VmRSS), or -1.
inline int64_t rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Raises this process's open-file limit to its hard limit (children inherit it); returns the
// soft limit now in force.
inline uint64_t raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(rl.rlim_cur);
}

// The OpenAI error object of a response body, or null when it is not one.
inline nlohmann::json error_of(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j["error"].is_object()) return nullptr;
  return j["error"];
}

}  // namespace tessera::test
