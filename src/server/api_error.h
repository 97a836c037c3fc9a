// Errors answered to clients as the OpenAI error object {"error": {message, type, param, code}}
// with an HTTP status (frontend.md §6.6): the SDKs map 400/401/404/413/429 to distinct exceptions
// and retry 429/5xx, so validation errors must never surface as 500. `code` is a string, as OpenAI
// sends it ("context_length_exceeded", "model_not_found", ...): clients branch on it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // Empty: the status's code (error_code).
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, code_;
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

// The error object's "code" for a status when the error has no more specific one (OpenAI's names
// where it has them).
inline const char* error_code(int status, const std::string& param = {}) {
  switch (status) {
    case 400:
      return "invalid_request";
    case 401:
      return "invalid_api_key";
    case 403:
      return "forbidden";
    case 404:
      return param == "model" ? "model_not_found" : "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "request_timeout";
    case 411:
      return "length_required";
    case 413:
      return "request_too_large";
    case 414:
      return "uri_too_long";
    case 429:
      return "rate_limit_exceeded";
    case 431:
      return "headers_too_large";
    case 499:
      return "client_closed_request";
    case 501:
      return "not_implemented";
    case 503:
      return "service_unavailable";
    case 505:
      return "http_version_not_supported";
    default:
      return status >= 500 ? "internal_error" : "invalid_request";
  }
}

}  // namespace tessera::server
