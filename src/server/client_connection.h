// Whether the client of a request is still there, for a handler that has nothing to write until
// its answer is complete (a non-streamed completion). Writing early to find out would commit the
// status line to 200 before the outcome is known (a request cut by shutdown would then get 200
// with an error body), so the connection's socket is looked at instead.
#pragma once

namespace tessera::server {

class ClientConnection {
 public:
  // `fd`: the request's connection (HttpRequest::fd), owned by the listener while the handler runs.
  explicit ClientConnection(int fd) : fd_(fd) {}

  // True once the client closed or reset the connection (a half-close too: an HTTP client waiting
  // for its answer does not shut down its sending side). Bytes of a pipelined next request are
  // not a close.
  bool closed();

 private:
  int fd_ = -1;
};

}  // namespace tessera::server
