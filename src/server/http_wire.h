// HTTP/1.1 request framing, incremental and with every limit enforced while reading: bytes are fed
// as they arrive and nothing beyond the configured header and body sizes is ever kept. A framing
// error has its HTTP status at once (400 malformed, 411 a POST without a length, 413 a body too
// large, 431 headers too large, 501 an unsupported Transfer-Encoding, 505 not HTTP/1.x), so the
// listener answers it without waiting for the rest of the request. Request smuggling defences
// (RFC 9112 §6.3): two different Content-Length values, a Content-Length beside Transfer-Encoding,
// and a Transfer-Encoding other than exactly "chunked" are refused. Pure (no I/O): fuzzed by
// fuzz/request/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::server {

struct WireLimits {
  size_t max_header_bytes = 16 << 10;  // request line + headers, terminating blank line included
  size_t max_headers = 100;
  size_t max_body_bytes = 8u << 20;  // after de-chunking
};

struct WireRequest {
  std::string method, target, path, query;
  int minor_version = 1;  // HTTP/1.<minor_version>
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;
  bool expect_continue = false;  // "Expect: 100-continue": the client waits for 100 before the body
  // The first value of header `name` (case-insensitive), "" when absent.
  const std::string& header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

class RequestParser {
 public:
  enum class State { kIdle, kHeaders, kBody, kDone, kError };

  explicit RequestParser(WireLimits limits = {}) : lim_(limits) {}

  // Consumes bytes of at most one request; returns how many were used (fewer than `n` when the
  // request ended or an error was found: the rest belongs to the next request or is discarded).
  size_t feed(const char* data, size_t n);
  State state() const { return state_; }
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kError; }
  // The headers are complete and the body is still to come (the moment to answer "100 Continue").
  bool awaiting_body() const { return state_ == State::kBody; }
  // The error's HTTP status and a short message (no echo of the input beyond a few bytes).
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // Declared body size (Content-Length), or -1 (chunked / none yet).
  int64_t content_length() const { return content_length_; }
  const WireRequest& request() const { return req_; }
  WireRequest take();  // the finished request; the parser is then ready for the next one
  void reset();

 private:
  size_t feed_headers(const char* data, size_t n);
  size_t feed_body(const char* data, size_t n);
  void parse_head();
  void fail(int status, std::string message);

  enum class Chunk { kSize, kData, kDataCr, kDataLf, kTrailer };
  WireLimits lim_;
  State state_ = State::kIdle;
  std::string head_;  // bytes of the request line and headers so far
  WireRequest req_;
  int64_t content_length_ = -1;
  bool chunked_ = false;
  Chunk chunk_state_ = Chunk::kSize;
  uint64_t chunk_left_ = 0;
  std::string line_;  // chunk-size or trailer line being read
  size_t trailer_bytes_ = 0;
  bool method_seen_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// At most `max` bytes of `s` for an error message: cut at a UTF-8 boundary, control characters
// escaped, "..." appended when cut. Never quote more of a client's input than this.
std::string excerpt(std::string_view s, size_t max = 40);

}  // namespace tessera::server
