// Validation of /v1/chat/completions and /v1/completions bodies into a GenerationJob: the prompt
// token ids, engine sampling parameters and the output options. Every problem is an ApiError 400
// (or 404 for an unknown model) naming the parameter, never an exception the server would turn
// into a 500. Chat prompts are rendered with the model's template here, so template errors
// (raise_exception included) are 400s too.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/served_model.h"
#include "text/reasoning/reasoning_parser.h"
#include "text/reasoning/tool_call_parser.h"

namespace tessera::server {

// The API a request came on. kMessages (Anthropic's /v1/messages) and kResponses (OpenAI's
// /v1/responses) are translated into a chat request, so their GenerationJob says kChat: only the
// answer's shape differs.
enum class Endpoint { kChat, kCompletion, kMessages, kResponses };

struct ParseLimits {
  int64_t max_n = 16;
  int64_t max_stop_strings = 16;
  int64_t max_stop_string_bytes = 1024;
  // Non-streamed responses with logprobs: choices x max_tokens x (1 + top_logprobs) at most this
  // (about 90 bytes of JSON each); more is a 400 naming max_tokens (--max-logprob-entries).
  int64_t max_logprob_entries = 400000;
  bool allow_test_script = false;  // --enable-test-script (TESSERA_TEST_HOOKS builds): accept "tessera_script"
};

struct GenerationJob {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;  // one engine request per prompt; chat: exactly one
  engine::SamplingParams params;
  std::vector<std::string> stop;
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  // Completions `echo`: each prompt's text (the string given, or its ids decoded) goes before its
  // choices' generated text.
  bool echo = false;
  std::vector<std::string> echo_texts;  // one per prompt
  // Chat only: reasoning and tool calls.
  bool include_reasoning = true;
  bool thinking = false;
  text::ReasoningState reasoning_start = text::ReasoningState::kContent;
  bool parse_tools = false;
  bool named_tool_choice = false;
  std::vector<std::string> tool_names;
};

GenerationJob parse_chat_request(const nlohmann::ordered_json& body, const ServedModel& model,
                                 const ParseLimits& limits);
GenerationJob parse_completion_request(const nlohmann::ordered_json& body, const ServedModel& model,
                                       const ParseLimits& limits);

// reasoning_effort -> reasoning-token budget (nullopt: no budget); throws 400 for unknown values.
std::optional<int64_t> reasoning_effort_budget(const std::string& effort);

}  // namespace tessera::server
