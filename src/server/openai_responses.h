// The OpenAI Responses API (POST /v1/responses) on top of the chat pipeline, as /v1/messages is: a
// request is translated into the chat request the /v1/chat/completions path parses (`instructions`
// and system/developer items become system messages, function_call items an assistant message's
// tool_calls, function_call_output items tool messages, reasoning.effort reasoning_effort,
// text.format response_format), so rendering, reasoning and tool-call parsing are the chat path's
// own. Only the answer is written differently: a `response` object whose output items are reasoning,
// message and function_call items, and the response.* event stream with sequence numbers. Nothing is
// stored: previous_response_id is refused, and store is echoed as false.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "server/generation.h"
#include "server/request_parse.h"
#include "server/response_json.h"

namespace tessera::server {

// The chat request equivalent to a Responses request; ApiError 400 naming the Responses field
// (input[2].call_id, tools[1].type, previous_response_id) for anything it cannot express or does
// not know.
OJson responses_to_chat_request(const OJson& body);
// responses_to_chat_request + parse_chat_request; an error from the latter names the Responses
// field (max_output_tokens, reasoning.effort, text.format), not the translated one. `echo` gets the
// request's settings that the response object repeats (instructions, tools, tool_choice,
// temperature, top_p, max_output_tokens, reasoning, text, metadata, ...).
GenerationJob parse_responses_request(const OJson& body, const ServedModel& model, const ParseLimits& limits,
                                      OJson& echo);
// The echoed settings for an accepted body (temperature and top_p as the job samples).
OJson responses_echo(const OJson& body, const GenerationJob& job);

// The response object: id, object, created_at, status (completed, incomplete or in_progress),
// incomplete_details, model, output, usage (null while in progress) and the echoed settings.
OJson response_object(const ResponseMeta& m, const OJson& echo, const std::string& status, OJson output,
                      const Usage* usage);
// The non-streamed answer from one accumulated choice: a reasoning item when the model reasoned, a
// message item when it wrote text, one function_call item per complete tool call.
OJson responses_response(const ResponseMeta& m, const OJson& echo, const ChoiceAccum& a, const Usage& u);
// The ids of output items: PREFIX_<the response's id>_<output index> (rs, msg, fc).
std::string output_item_id(const ResponseMeta& m, const char* prefix, size_t index);

// The streamed answer: turns the generation's events into the Responses API's events, each
// "event: TYPE\ndata: JSON\n\n" with an increasing sequence_number. One output item is open at a
// time; a delta of another kind (reasoning, text, a new tool call) closes it and opens the next,
// so items come in the order the model wrote them.
class ResponsesStream {
 public:
  ResponsesStream(ResponseMeta meta, OJson echo) : meta_(std::move(meta)), echo_(std::move(echo)) {}
  // response.created and response.in_progress.
  std::string start();
  // The item events for one generation event (possibly "").
  std::string add(const ChoiceEvent& ev);
  // Closes the open item; response.completed or response.incomplete with the whole response.
  std::string finish(const Usage& u);
  // The `error` event that ends a stream cut by a failure.
  std::string error(int status, const std::string& message);

 private:
  enum class Item { kNone, kReasoning, kMessage, kFunctionCall };
  std::string event(OJson j);
  std::string open(Item kind, OJson item);
  std::string close(const char* status);

  ResponseMeta meta_;
  OJson echo_;
  int64_t sequence_ = 0;
  Item item_ = Item::kNone;
  OJson current_;                  // the open item (its text or arguments filled in as they stream)
  OJson output_ = OJson::array();  // the closed items
  std::string text_;               // the open item's text, reasoning or arguments so far
  int64_t tool_call_ = -1;         // the generation's index of the tool call in the open function_call item
  std::optional<std::string> finish_reason_;
  std::optional<int64_t> complete_tool_calls_;  // from the generation's last event
};

}  // namespace tessera::server
