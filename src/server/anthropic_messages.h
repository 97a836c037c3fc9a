// The Anthropic Messages API (POST /v1/messages) on top of the chat pipeline. A request is
// translated into the OpenAI chat request the /v1/chat/completions path parses (system and
// tool_result blocks become system and tool messages, tool_use blocks tool_calls, thinking blocks
// reasoning_content), so rendering, reasoning and tool-call parsing are the chat path's own; only
// the answer is written differently: content blocks (thinking, text, tool_use), stop_reason, and the
// message_start / content_block_* / message_delta / message_stop event stream.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "server/generation.h"
#include "server/request_parse.h"
#include "server/response_json.h"

namespace tessera::server {

// The OpenAI chat request equivalent to an Anthropic Messages request; ApiError 400 naming the
// Anthropic field (messages[1].content[0].tool_use_id) for anything it cannot express.
OJson messages_to_chat_request(const OJson& body);
// messages_to_chat_request + parse_chat_request; an error from the latter names the Anthropic field
// (stop_sequences, thinking.budget_tokens), not the translated one.
GenerationJob parse_messages_request(const OJson& body, const ServedModel& model, const ParseLimits& limits);
// POST /v1/messages/count_tokens: the prompt's length in tokens as /v1/messages would render it
// (max_tokens is not needed there, and ignored).
int64_t count_message_tokens(const OJson& body, const ServedModel& model, const ParseLimits& limits);

// {"type":"error","error":{"type":...,"message":...}}; the field at fault leads the message
// (Anthropic's error object has no param).
OJson anthropic_error_json(int status, const std::string& message, const std::string& param = {});
// One Anthropic server-sent event: "event: TYPE\ndata: JSON\n\n", TYPE being j["type"].
std::string anthropic_sse(const OJson& j);

// end_turn, max_tokens, stop_sequence or tool_use from how the choice finished.
std::string anthropic_stop_reason(const std::optional<std::string>& finish_reason, bool tool_calls,
                                  const std::optional<std::string>& stop_string);
// Anthropic's tool_use input is an object: the arguments parsed, or the raw text when the model
// wrote no JSON object (kept rather than dropped, so the client can see what it said).
OJson tool_input(const std::string& arguments);

// The non-streamed answer (type "message") from one accumulated choice.
OJson messages_response(const ResponseMeta& m, const ChoiceAccum& a, const Usage& u);

// The streamed answer: turns the generation's events into Anthropic's events. One content block is
// open at a time; a delta of another kind (reasoning, text, a new tool call) closes it and opens the
// next, so blocks come in the order the model wrote them.
class MessagesStream {
 public:
  MessagesStream(ResponseMeta meta, int64_t input_tokens) : meta_(std::move(meta)), input_tokens_(input_tokens) {}
  // message_start (an empty message) and a ping.
  std::string start() const;
  // The block events for one generation event (possibly "").
  std::string add(const ChoiceEvent& ev);
  // Closes the open block; message_delta (stop_reason, usage) and message_stop.
  std::string finish(const Usage& u);

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  std::string open(Block b, OJson content_block);
  std::string close();

  ResponseMeta meta_;
  int64_t input_tokens_ = 0;
  Block block_ = Block::kNone;
  int64_t index_ = -1;      // of the open (or last) content block
  int64_t tool_call_ = -1;  // the generation's index of the tool call in the open tool_use block
  bool tool_calls_ = false;
  std::optional<std::string> finish_reason_, stop_string_;
};

}  // namespace tessera::server
