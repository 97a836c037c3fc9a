#include "server/http_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tessera::server {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// RFC 9110 token characters (methods, header names).
bool is_tchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const std::string kEmpty;

}  // namespace

std::string excerpt(std::string_view s, size_t max) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (!valid) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (len == 1 && (c < 0x20 || c == 0x7f)) {
      out += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

const std::string& WireRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return kEmpty;
}

bool WireRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return iequals(h.first, name); });
}

void RequestParser::reset() {
  state_ = State::kIdle;
  head_.clear();
  req_ = WireRequest{};
  content_length_ = -1;
  chunked_ = false;
  chunk_state_ = Chunk::kSize;
  chunk_left_ = 0;
  line_.clear();
  trailer_bytes_ = 0;
  method_seen_ = false;
  error_status_ = 0;
  error_message_.clear();
}

WireRequest RequestParser::take() {
  WireRequest r = std::move(req_);
  reset();
  return r;
}

void RequestParser::fail(int status, std::string message) {
  if (state_ == State::kError) return;
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestParser::feed(const char* data, size_t n) {
  size_t used = 0;
  if (state_ == State::kIdle) {
    // Blank lines before a request line are ignored (RFC 9112 §2.2), e.g. a stray CRLF after a body.
    while (used < n && (data[used] == '\r' || data[used] == '\n')) ++used;
    if (used == n) return used;
    state_ = State::kHeaders;
  }
  if (state_ == State::kHeaders) used += feed_headers(data + used, n - used);
  if (state_ == State::kBody && used < n) used += feed_body(data + used, n - used);
  return used;
}

size_t RequestParser::feed_headers(const char* data, size_t n) {
  const size_t old = head_.size();
  const size_t room = lim_.max_header_bytes - std::min(lim_.max_header_bytes, old);
  const size_t take = std::min(n, room);
  head_.append(data, take);
  // Not HTTP at all (a TLS handshake, a binary protocol): refused at its first bytes rather than
  // at the header deadline. The method is a token of at most 32 characters before the first space.
  if (!method_seen_) {
    for (size_t i = old; i < head_.size(); ++i) {
      if (head_[i] == ' ') {
        method_seen_ = true;
        break;
      }
      if (!is_tchar(head_[i]) || i >= 32) {
        fail(400, fmt::format("malformed request line starting '{}'", excerpt(head_, 16)));
        return take;
      }
    }
  }
  // The end of the headers: a blank line (CRLF CRLF, or a bare LF LF).
  const size_t from = old >= 3 ? old - 3 : 0;
  size_t end = std::string::npos, end_len = 0;
  for (size_t i = from; i < head_.size(); ++i) {
    if (head_[i] != '\n') continue;
    if (i >= 1 && head_[i - 1] == '\n') {
      end = i - 1, end_len = 2;
      break;
    }
    if (i >= 2 && head_[i - 1] == '\r' && head_[i - 2] == '\n') {
      end = i - 2, end_len = 3;
      break;
    }
  }
  if (end == std::string::npos) {
    if (take < n || head_.size() >= lim_.max_header_bytes) {
      if (head_.find('\n') == std::string::npos)
        fail(414, fmt::format("the request line is longer than {} bytes", lim_.max_header_bytes));
      else
        fail(431, fmt::format("the request headers exceed {} bytes", lim_.max_header_bytes));
    }
    return take;
  }
  const size_t consumed = end + end_len - old;  // bytes of `data` up to and including the blank line
  head_.resize(end + 1);                        // keep the last header line's LF
  parse_head();
  head_.clear();
  head_.shrink_to_fit();
  return consumed;
}

void RequestParser::parse_head() {
  std::vector<std::string_view> lines;
  std::string_view h(head_);
  while (!h.empty()) {
    size_t nl = h.find('\n');
    if (nl == std::string_view::npos) nl = h.size();
    std::string_view line = h.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    h.remove_prefix(std::min(h.size(), nl + 1));
  }
  if (lines.empty()) return fail(400, "empty request");
  // Request line: METHOD SP request-target SP HTTP-version.
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, fmt::format("malformed request line '{}'", excerpt(rl)));
  const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_tchar))
    return fail(400, fmt::format("malformed method '{}'", excerpt(method)));
  if (target.empty() || std::any_of(target.begin(), target.end(),
                                    [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
    return fail(400, fmt::format("malformed request target '{}'", excerpt(target)));
  if (version == "HTTP/1.1") {
    req_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    req_.minor_version = 0;
  } else if (version.substr(0, 5) == "HTTP/") {
    return fail(505, fmt::format("HTTP version '{}' is not supported (HTTP/1.0 and 1.1 are)", excerpt(version)));
  } else {
    return fail(400, fmt::format("malformed HTTP version '{}'", excerpt(version)));
  }
  req_.method = method;
  req_.target = target;
  const size_t q = target.find('?');
  req_.path = percent_decode(target.substr(0, q));
  if (q != std::string_view::npos) req_.query = target.substr(q + 1);

  bool close = false, keep_alive_token = false;
  std::string_view te;
  int te_count = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.empty()) continue;
    if (line.front() == ' ' || line.front() == '\t')
      return fail(400, "obsolete line folding in the request headers is not accepted");
    if (req_.headers.size() >= lim_.max_headers)
      return fail(431, fmt::format("more than {} request headers", lim_.max_headers));
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail(400, fmt::format("malformed header line '{}'", excerpt(line)));
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar))
      return fail(400, fmt::format("malformed header name '{}'", excerpt(name)));
    const std::string_view value = trim_ows(line.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return (u < 0x20 && u != '\t') || u == 0x7f;
        }))
      return fail(400, fmt::format("control characters in header '{}'", excerpt(name)));
    req_.headers.emplace_back(name, value);
    if (iequals(name, "Content-Length")) {
      // A list ("5, 5") or repeated headers must all agree; anything else is a smuggling attempt.
      std::string_view rest = value;
      while (true) {
        const size_t comma = rest.find(',');
        const std::string_view v = trim_ows(rest.substr(0, comma));
        if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return fail(400, fmt::format("Content-Length '{}' is not a non-negative decimal number", excerpt(value)));
        int64_t len = 0;
        for (char c : v) {
          if (len > (INT64_MAX - 9) / 10) {
            return fail(413, fmt::format("Content-Length {} exceeds the largest accepted body of {} bytes", excerpt(v),
                                         lim_.max_body_bytes));
          }
          len = len * 10 + (c - '0');
        }
        if (content_length_ >= 0 && content_length_ != len)
          return fail(400, "conflicting Content-Length values in one request");
        content_length_ = len;
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (iequals(name, "Transfer-Encoding")) {
      te = value;
      ++te_count;
    } else if (iequals(name, "Connection")) {
      // A comma-separated list of tokens.
      std::string_view rest = value;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view tok = trim_ows(rest.substr(0, comma));
        if (iequals(tok, "close")) close = true;
        if (iequals(tok, "keep-alive")) keep_alive_token = true;
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue"))
        return fail(417, fmt::format("Expect '{}' is not supported (only 100-continue)", excerpt(value)));
      req_.expect_continue = true;
    }
  }
  if (te_count > 0) {
    if (req_.minor_version == 0) return fail(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    if (content_length_ >= 0) return fail(400, "a request may not have both Content-Length and Transfer-Encoding");
    if (te_count > 1 || !iequals(te, "chunked"))
      return fail(501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", excerpt(te)));
    chunked_ = true;
  }
  // HTTP/1.1 keeps the connection unless asked to close; HTTP/1.0 closes unless asked to keep it.
  req_.keep_alive = !close && (req_.minor_version == 1 || keep_alive_token);
  if (content_length_ > static_cast<int64_t>(lim_.max_body_bytes))
    return fail(413, fmt::format("the request body of {} bytes exceeds the limit of {} bytes", content_length_,
                                 lim_.max_body_bytes));
  const bool needs_body = req_.method == "POST" || req_.method == "PUT" || req_.method == "PATCH";
  if (needs_body && !chunked_ && content_length_ < 0)
    return fail(411, fmt::format("a {} request needs Content-Length or Transfer-Encoding: chunked", req_.method));
  if (!chunked_ && content_length_ <= 0) {
    state_ = State::kDone;
    return;
  }
  // No reserve(content_length_): memory follows the bytes that actually arrived, not a declared size.
  state_ = State::kBody;
}

size_t RequestParser::feed_body(const char* data, size_t n) {
  if (!chunked_) {
    const size_t want = static_cast<size_t>(content_length_) - req_.body.size();
    const size_t take = std::min(want, n);
    req_.body.append(data, take);
    if (req_.body.size() == static_cast<size_t>(content_length_)) state_ = State::kDone;
    return take;
  }
  size_t i = 0;
  while (i < n && state_ == State::kBody) {
    const char c = data[i];
    switch (chunk_state_) {
      case Chunk::kSize:
      case Chunk::kTrailer: {
        ++i;
        if (c != '\n') {
          if (chunk_state_ == Chunk::kSize && line_.size() >= 256)
            return fail(400, "a chunk-size line is longer than 256 bytes"), i;
          if (chunk_state_ == Chunk::kTrailer && ++trailer_bytes_ > lim_.max_header_bytes)
            return fail(431, fmt::format("the request trailers exceed {} bytes", lim_.max_header_bytes)), i;
          line_ += c;
          break;
        }
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (chunk_state_ == Chunk::kTrailer) {
          if (line_.empty()) state_ = State::kDone;
          line_.clear();
          break;
        }
        std::string_view sz = trim_ows(std::string_view(line_).substr(0, line_.find(';')));
        if (sz.empty()) return fail(400, fmt::format("malformed chunk size '{}'", excerpt(line_))), i;
        uint64_t v = 0;
        for (char h : sz) {
          const int d = hex_value(h);
          if (d < 0) return fail(400, fmt::format("malformed chunk size '{}'", excerpt(line_))), i;
          if (v > (UINT64_MAX >> 4))
            return fail(413, fmt::format("a chunk of size {} exceeds the body limit of {} bytes", excerpt(sz),
                                         lim_.max_body_bytes)),
                   i;
          v = v * 16 + static_cast<uint64_t>(d);
        }
        line_.clear();
        if (v > lim_.max_body_bytes - req_.body.size())
          return fail(413, fmt::format("the chunked request body exceeds the limit of {} bytes", lim_.max_body_bytes)),
                 i;
        if (v == 0) {
          chunk_state_ = Chunk::kTrailer;
        } else {
          chunk_left_ = v;
          chunk_state_ = Chunk::kData;
        }
        break;
      }
      case Chunk::kData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left_, n - i));
        req_.body.append(data + i, take);
        i += take;
        chunk_left_ -= take;
        if (chunk_left_ == 0) chunk_state_ = Chunk::kDataCr;
        break;
      }
      case Chunk::kDataCr:
        ++i;
        if (c == '\n') {
          chunk_state_ = Chunk::kSize;
        } else if (c == '\r') {
          chunk_state_ = Chunk::kDataLf;
        } else {
          return fail(400, "a chunk's data is not followed by CRLF"), i;
        }
        break;
      case Chunk::kDataLf:
        ++i;
        if (c != '\n') return fail(400, "a chunk's data is not followed by CRLF"), i;
        chunk_state_ = Chunk::kSize;
        break;
    }
  }
  return i;
}

}  // namespace tessera::server
