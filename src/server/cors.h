// Cross-origin requests from browsers (--allowed-origins): which page origins may call the API and
// read its answers, and the answer to a browser's preflight. Off by default: without the flag no
// response carries Access-Control-* headers, so a page on another origin cannot read anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http_listener.h"

namespace tessera::server {

class CorsPolicy {
 public:
  CorsPolicy() = default;
  // `origins`: "*" (any), or exact origins "scheme://host[:port]" as browsers send them in Origin
  // (no path, no trailing slash). Throws core::Error naming --allowed-origins and the bad item.
  explicit CorsPolicy(const std::vector<std::string>& origins);

  bool enabled() const { return any_ || !origins_.empty(); }
  bool allows(std::string_view origin) const;

  // A browser's preflight: OPTIONS with Origin and Access-Control-Request-Method.
  static bool is_preflight(const WireRequest& w);
  // Answers a preflight for a route that takes `methods` ("GET, HEAD" or "POST"): 204 with the
  // Access-Control-Allow-* headers when the origin is allowed; false (res untouched) when not.
  // Answered before the API key check: browsers send preflights without credentials.
  bool answer_preflight(const WireRequest& w, const std::string& methods, HttpResponse& res) const;
  // On an actual request from an allowed Origin: Access-Control-Allow-Origin and Vary: Origin.
  void add_headers(const WireRequest& w, HttpResponse& res) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;
};

}  // namespace tessera::server
