// The request path before any model is involved: HTTP/1.1 framing (RequestParser, fed in pieces
// whose sizes come from the input) and the JSON guard + parse of the body. Any input must end in a
// request or an error with a 4xx/5xx framing status or an ApiError 400: no crash, hang, sanitizer
// report, or memory beyond the limits. "@DEEP@" in the input expands to 200,000 '[' (and "@OBJ@" to
// an object of 5,000 members), so that nesting and object size far past the limits are always
// exercised, not only what libFuzzer's length limit allows.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/http_wire.h"
#include "server/json_guard.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

std::string expand(std::string_view in) {
  std::string out;
  size_t i = 0;
  while (i < in.size()) {
    if (in.substr(i, 6) == "@DEEP@") {
      out.append(200000, '[');
      i += 6;
    } else if (in.substr(i, 5) == "@OBJ@") {
      out += '{';
      for (int k = 0; k < 5000; ++k) out += (k ? ",\"k" : "\"k") + std::to_string(k) + "\":0";
      out += '}';
      i += 5;
    } else {
      out += in[i++];
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 256 * 1024) return 0;
  const size_t step = 1 + data[0] % 64;  // bytes per feed() call (0: the rest at once)
  const std::string input = expand(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  tessera::server::WireLimits lim;
  lim.max_header_bytes = 4096;
  lim.max_headers = 32;
  lim.max_body_bytes = 1 << 20;
  tessera::server::RequestParser parser(lim);
  size_t pos = 0;
  int requests = 0;
  while (pos < input.size() && requests < 64) {
    const size_t n = data[0] >= 192 ? input.size() - pos : std::min(step, input.size() - pos);
    const size_t used = parser.feed(input.data() + pos, n);
    check(used <= n);
    pos += used;
    if (parser.failed()) {
      const int st = parser.error_status();
      check(st == 400 || st == 411 || st == 413 || st == 414 || st == 417 || st == 431 || st == 501 || st == 505);
      check(parser.error_message().size() < 512);  // never an echo of the input
      break;
    }
    if (parser.done()) {
      ++requests;
      const tessera::server::WireRequest req = parser.take();
      check(req.body.size() <= lim.max_body_bytes);
      try {
        const auto j = tessera::server::parse_request_json(req.body, tessera::server::JsonLimits{});
        (void)j.dump();  // recursion over the accepted value: bounded by the depth limit
      } catch (const tessera::server::ApiError& e) {
        check(e.status() == 400);
        check(std::string_view(e.what()).size() < 1024);
      }
      continue;
    }
    if (used < n) break;  // cannot happen: an unfinished request takes every byte
  }
  // The body as JSON on its own too (the fuzzer rarely builds valid framing around deep JSON).
  try {
    const auto j = tessera::server::parse_request_json(input, tessera::server::JsonLimits{});
    (void)j.dump();
  } catch (const tessera::server::ApiError& e) {
    check(e.status() == 400 && std::string_view(e.what()).size() < 1024);
  }
  return 0;
}
