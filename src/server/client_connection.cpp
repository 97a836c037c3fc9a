#include "server/client_connection.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <filesystem>

namespace tessera::server {
namespace {

// The numeric address and port of a socket's own (`peer` false) or remote end, spelled as
// cpp-httplib spells Request::local_addr / remote_addr (getnameinfo with NI_NUMERICHOST).
bool address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return false;
  if (addr.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  else
    return false;
  std::array<char, NI_MAXHOST> host{};
  if (::getnameinfo(sa, len, host.data(), static_cast<socklen_t>(host.size()), nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  ip = host.data();
  return true;
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& req)
    : local_addr_(req.local_addr),
      remote_addr_(req.remote_addr),
      local_port_(req.local_port),
      remote_port_(req.remote_port) {}

bool ClientConnection::closed() {
  if (!searched_) {
    searched_ = true;
    // The connection stays open (and its descriptor ours) until this request's handler returns,
    // so the descriptor found here cannot be reused under us. Ports are compared first: cheap, and
    // they rule out nearly every other socket.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const std::string name = entry.path().filename().string();
      int fd = -1;
      if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
      struct stat st {};
      if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      std::string local_ip, remote_ip;
      int local_port = -1, remote_port = -1;
      if (!address_of(fd, false, local_ip, local_port) || local_port != local_port_) continue;
      if (!address_of(fd, true, remote_ip, remote_port) || remote_port != remote_port_) continue;
      if (local_ip == local_addr_ && remote_ip == remote_addr_) {
        fd_ = fd;
        break;
      }
    }
    if (fd_ < 0)
      spdlog::debug("no socket found for the connection from {}:{}: its disconnect goes unnoticed", remote_addr_,
                    remote_port_);
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;  // nothing to read: the client is waiting
  if (p.revents & POLLNVAL) return true;
  // Readable: the end of the stream (0), a reset (error), or bytes of a pipelined next request.
  char byte = 0;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  return true;
}

}  // namespace tessera::server
