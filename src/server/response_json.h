// JSON of the OpenAI responses (frontend.md §6.2-6.8): streamed chunks are built per generation
// event, and the non-streamed body from the same events accumulated per choice, so both carry the
// same content, reasoning and tool calls.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/request_parse.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::server {

using OJson = nlohmann::ordered_json;

struct ResponseMeta {
  std::string id, model;
  int64_t created = 0;
};

// Everything one choice produced so far.
struct ChoiceAccum {
  std::string content, reasoning;
  std::map<int64_t, text::ToolCall> tool_calls;  // by tool-call index
  std::vector<engine::SampledToken> tokens;
  std::optional<std::string> finish_reason, stop_string;
  int64_t text_offset = 0;  // completions logprobs: bytes of text before the next token
};
void accumulate(ChoiceAccum& acc, const ChoiceEvent& ev);

OJson error_json(int status, const std::string& message, const std::string& param = {}, const std::string& code = {});
OJson usage_json(const Usage& u, bool chat);

// Chat: the first chunk of a choice (role), one chunk per event (null when the event carries
// nothing to send), and the complete response.
OJson chat_role_chunk(const ResponseMeta& m, int64_t index);
// Completions with `echo`: the prompt's text of a choice ("" without echo), and the chunk that
// streams it first.
std::string echo_text(const GenerationJob& job, int64_t choice);
OJson completion_echo_chunk(const ResponseMeta& m, const GenerationJob& job, int64_t choice);
OJson chat_chunk(const ResponseMeta& m, const ChoiceEvent& ev, const GenerationJob& job, const text::Tokenizer& tok);
OJson chat_response(const ResponseMeta& m, const std::vector<ChoiceAccum>& choices, const Usage& u,
                    const GenerationJob& job, const text::Tokenizer& tok);

OJson completion_chunk(const ResponseMeta& m, const ChoiceEvent& ev, ChoiceAccum& acc, const GenerationJob& job,
                       const text::Tokenizer& tok);
OJson completion_response(const ResponseMeta& m, const std::vector<ChoiceAccum>& choices, const Usage& u,
                          const GenerationJob& job, const text::Tokenizer& tok);
OJson usage_chunk(const ResponseMeta& m, const Usage& u, bool chat);

// Serializes with invalid UTF-8 (a lone byte of a token's logprob entry) replaced, never throwing.
std::string dump(const OJson& j);

}  // namespace tessera::server
