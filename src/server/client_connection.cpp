#include "server/client_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace tessera::server {

bool ClientConnection::closed() {
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
