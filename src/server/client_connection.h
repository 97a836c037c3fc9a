// Whether the client of a request is still there, for a handler that has nothing to write until
// its answer is complete (a non-streamed completion). cpp-httplib 0.11 (Debian 12's) notices a
// vanished client only when a write fails and does not give handlers their socket; writing early
// to find out would commit the status line to 200 before the outcome is known (the old heartbeat
// did, and a request cut by shutdown then got 200 with an error body). Newer cpp-httplib (0.18.5)
// has Request::is_connection_closed, which does what this does.
#pragma once

#include <string>

namespace httplib {
struct Request;
}

namespace tessera::server {

class ClientConnection {
 public:
  // Remembers the connection's addresses; nothing is looked up until closed() is first called.
  explicit ClientConnection(const httplib::Request& req);

  // True once the client closed or reset the connection (a half-close too: an HTTP client waiting
  // for its answer does not shut down its sending side). The socket is found on the first call,
  // among the process's descriptors, as the TCP socket with the request's local and remote address
  // and port; when it cannot be found, the answer is always false (the request then runs to its end).
  bool closed();

 private:
  std::string local_addr_, remote_addr_;
  int local_port_ = -1, remote_port_ = -1;
  int fd_ = -1;
  bool searched_ = false;
};

}  // namespace tessera::server
