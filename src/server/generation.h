// One admitted generation request running on the engine: it submits one engine request per
// prompt, pops their output streams, feeds every choice's OutputParser and hands out per-choice
// events (text / reasoning / tool-call deltas, the tokens for logprobs, the finish reason). Both
// the streaming and the non-streaming responses are built from these events.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/served_model.h"
#include "text/reasoning/output_parser.h"

namespace tessera::server {

struct ChoiceEvent {
  int64_t index = 0;
  text::OutputDelta delta;
  std::vector<engine::SampledToken> tokens;  // generated in this event (for logprobs)
  std::optional<std::string> finish_reason;
  // With finish_reason "stop" from a stop string: that string (Anthropic's stop_sequence).
  std::optional<std::string> stop_string;
  // Set at the end when max_tokens cut a tool call short: calls with index >= this are incomplete
  // (non-streamed responses drop them; streamed ones already sent their deltas, flagged by
  // finish_reason "length").
  std::optional<int64_t> complete_tool_calls;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, reasoning_tokens = 0, cached_tokens = 0;
};

class Generation {
 public:
  // Submits to the engine; engine validation failures become ApiError 400.
  Generation(engine::Engine& engine, const ServedModel& model, const GenerationJob& job, std::string id,
             ServerMetrics* metrics);
  ~Generation();  // aborts whatever is still running
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `timeout` for output and appends the events; returns false once every choice has
  // finished (the events of the final call are still appended).
  bool poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds timeout);
  // Aborts all engine requests (client gone / shutdown).
  void abort();
  bool done() const { return remaining_ == 0; }
  bool engine_failed() const { return engine_failed_; }
  Usage usage() const;
  int64_t num_choices() const { return static_cast<int64_t>(choices_.size()); }

 private:
  struct Choice {
    std::unique_ptr<text::OutputParser> parser;
    bool done = false;
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  struct Sub {
    std::string id;
    engine::OutputStreamPtr stream;
    int64_t prompt_tokens = 0, cached = 0;
    bool finished = false;
  };
  void handle(size_t sub, engine::RequestOutput&& o, std::vector<ChoiceEvent>& out);
  void finish_choice(int64_t index, const std::string& reason, ChoiceEvent& ev);
  void record_end();

  engine::Engine& engine_;
  const GenerationJob& job_;
  ServerMetrics* metrics_;
  std::vector<Sub> subs_;
  std::vector<Choice> choices_;
  int64_t remaining_ = 0;
  bool first_token_ = true, engine_failed_ = false, recorded_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::server
