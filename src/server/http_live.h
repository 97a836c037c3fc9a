// Internals shared by the HTTP server's files: the state of one admitted request and SSE framing.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/http_server.h"
#include "server/response_json.h"

namespace tessera::server {

// One admitted request: the parsed job, its generation, and the admission slot it holds until the
// response (streamed or not) is finished; destroying it aborts an unfinished generation.
struct HttpServer::Live {
  ServerMetrics* metrics = nullptr;
  GenerationJob job;
  std::unique_ptr<Generation> gen;
  ResponseMeta meta;
  std::vector<ChoiceAccum> accum;
  bool started = false, finished = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  ~Live() {
    gen.reset();
    if (metrics) metrics->in_flight--;
  }
};

// One server-sent event carrying `j`.
inline std::string sse(const OJson& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace tessera::server
