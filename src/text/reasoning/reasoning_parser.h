// Token-level reasoning state machine (<think> ... </think>), one per generated sample. It is fed
// only generated token ids; its starting state comes from the end of the rendered prompt, so a
// prompt that already opened <think> (DeepSeek-R1, Kimi-K2.5, V3.1 thinking) starts in reasoning
// and earlier turns' </think> in the history never confuse it (frontend.md §4.2 "multi-turn pitfall").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tessera::text {

struct ReasoningMarkers {
  int32_t think_start = -1;  // -1: the vocabulary has no <think> token (reasoning never starts)
  int32_t think_end = -1;
  // Tokens that end reasoning implicitly and are then handled as content (Kimi: a tool section).
  std::vector<int32_t> implicit_end;

  bool valid() const { return think_start >= 0 && think_end >= 0; }
};

// <think> / </think> of `tok`, and Kimi's tool-section tokens as implicit ends.
ReasoningMarkers find_reasoning_markers(const Tokenizer& tok);

enum class ReasoningState {
  kExpectThink,  // the model may open <think> itself (K2-Thinking, V3 with thinking on)
  kReasoning,
  kContent,
};

// Where generation starts: the prompt's last <think> not followed by </think> means reasoning;
// otherwise the model may still open it when thinking is enabled.
ReasoningState initial_reasoning_state(std::span<const int32_t> prompt, const ReasoningMarkers& m,
                                       bool thinking_enabled);

class ReasoningParser {
 public:
  enum class Route { kReasoning, kContent, kMarker };

  ReasoningParser(ReasoningMarkers markers, ReasoningState start);
  // Classifies the next generated token. kMarker: a <think>/</think> marker, dropped from output.
  // An implicit end token is returned as kContent (the tool parser consumes it).
  Route feed(int32_t id);
  ReasoningState state() const { return state_; }
  // Tokens generated inside reasoning, the closing marker included.
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  ReasoningMarkers m_;
  ReasoningState state_;
  int64_t reasoning_tokens_ = 0;
};

}  // namespace tessera::text
