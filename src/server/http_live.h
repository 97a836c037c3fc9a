// Internals shared by the HTTP server's files: the state of one admitted request and SSE framing.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/openai_responses.h"
#include "server/response_json.h"

namespace tessera::server {

// One admitted request: the parsed job, its generation, and the admission slot it holds until the
// response (streamed or not) is finished; destroying it aborts an unfinished generation.
struct HttpServer::Live {
  ServerMetrics* metrics = nullptr;
  Endpoint api = Endpoint::kChat;  // the API asked: the shape of the answer
  GenerationJob job;
  std::unique_ptr<Generation> gen;
  ResponseMeta meta;
  std::vector<ChoiceAccum> accum;
  std::optional<MessagesStream> messages;    // /v1/messages: its event stream's state
  OJson responses_echo;                      // /v1/responses: the settings its response repeats
  std::optional<ResponsesStream> responses;  // /v1/responses, streamed: its event stream's state
  bool started = false, finished = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  ~Live() {
    gen.reset();
    if (metrics) metrics->in_flight--;
  }
};

// One server-sent event carrying `j`.
inline std::string sse(const OJson& j) { return "data: " + dump(j) + "\n\n"; }

// The end of a stream cut by an error: OpenAI chat and completions clients read an error chunk then
// [DONE]; Anthropic's and the Responses API's an `error` event (their streams have no [DONE]; the
// latter's is numbered by its stream, `responses`).
inline std::string stream_error(Endpoint api, int status, const std::string& message,
                                std::optional<ResponsesStream>* responses = nullptr) {
  if (api == Endpoint::kMessages) return anthropic_sse(anthropic_error_json(status, message));
  if (api == Endpoint::kResponses && responses && *responses) return (*responses)->error(status, message);
  return sse(error_json(status, message)) + "data: [DONE]\n\n";
}

}  // namespace tessera::server
