// Errors answered to clients as the OpenAI error object {"error": {message, type, param, code}}
// with an HTTP status (frontend.md §6.6): the SDKs map 400/401/404/413/429 to distinct exceptions
// and retry 429/5xx, so validation errors must never surface as 500.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

template <class... Args>
[[noreturn]] void bad_request(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, fmt::format(f, std::forward<Args>(args)...), param);
}

// OpenAI's error "type" for a status.
inline const char* error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "internal_server_error" : "invalid_request_error";
  }
}

}  // namespace tessera::server
