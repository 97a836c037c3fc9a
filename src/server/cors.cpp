#include "server/cors.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::server {

namespace {

// What a browser sends in Origin: "http://host", "https://host:port" (lower-case scheme, no path).
bool looks_like_origin(const std::string& o) {
  const size_t sep = o.find("://");
  if (sep == std::string::npos || sep == 0) return false;
  const std::string scheme = o.substr(0, sep), rest = o.substr(sep + 3);
  if (!std::all_of(scheme.begin(), scheme.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '+'; }))
    return false;
  if (rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) return false;
  return true;
}

}  // namespace

CorsPolicy::CorsPolicy(const std::vector<std::string>& origins) {
  for (const std::string& o : origins) {
    if (o == "*") {
      any_ = true;
      continue;
    }
    if (!looks_like_origin(o))
      core::fail(
          "--allowed-origins '{}': an origin is scheme://host[:port] as a browser sends it (e.g. "
          "https://app.example.com, no path or trailing slash), or * for any",
          o);
    origins_.push_back(o);
  }
}

bool CorsPolicy::allows(std::string_view origin) const {
  if (origin.empty()) return false;
  return any_ || std::find(origins_.begin(), origins_.end(), origin) != origins_.end();
}

bool CorsPolicy::is_preflight(const WireRequest& w) {
  return w.method == "OPTIONS" && w.has_header("Origin") && w.has_header("Access-Control-Request-Method");
}

bool CorsPolicy::answer_preflight(const WireRequest& w, const std::string& methods, HttpResponse& res) const {
  const std::string& origin = w.header("Origin");
  if (!allows(origin)) return false;
  res.status = 204;
  res.set_header("Access-Control-Allow-Origin", any_ ? "*" : origin);
  res.set_header("Access-Control-Allow-Methods", methods + ", OPTIONS");
  // The headers the page asked for (Authorization, Content-Type, the OpenAI SDKs' X-Stainless-*):
  // the API reads only Authorization and Content-Type, so any may be sent.
  const std::string& asked = w.header("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
  res.set_header("Access-Control-Max-Age", "86400");
  if (!any_) res.set_header("Vary", "Origin");
  return true;
}

void CorsPolicy::add_headers(const WireRequest& w, HttpResponse& res) const {
  if (!enabled()) return;
  const std::string& origin = w.header("Origin");
  if (!allows(origin)) return;
  res.set_header("Access-Control-Allow-Origin", any_ ? "*" : origin);
  if (!any_) res.set_header("Vary", "Origin");
}

}  // namespace tessera::server
