#include "text/reasoning/reasoning_parser.h"

#include <algorithm>

namespace tessera::text {

ReasoningMarkers find_reasoning_markers(const Tokenizer& tok) {
  ReasoningMarkers m;
  if (auto id = tok.token_to_id("<think>")) m.think_start = *id;
  if (auto id = tok.token_to_id("</think>")) m.think_end = *id;
  for (const char* s : {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", "<|tool_call_begin|>"})
    if (auto id = tok.token_to_id(s)) m.implicit_end.push_back(*id);
  return m;
}

ReasoningState initial_reasoning_state(std::span<const int32_t> prompt, const ReasoningMarkers& m,
                                       bool thinking_enabled) {
  if (!m.valid()) return ReasoningState::kContent;
  for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
    if (*it == m.think_end) break;
    if (*it == m.think_start) return ReasoningState::kReasoning;
  }
  return thinking_enabled ? ReasoningState::kExpectThink : ReasoningState::kContent;
}

ReasoningParser::ReasoningParser(ReasoningMarkers markers, ReasoningState start)
    : m_(std::move(markers)), state_(m_.valid() ? start : ReasoningState::kContent) {}

ReasoningParser::Route ReasoningParser::feed(int32_t id) {
  if (!m_.valid()) return Route::kContent;
  const bool implicit = std::find(m_.implicit_end.begin(), m_.implicit_end.end(), id) != m_.implicit_end.end();
  switch (state_) {
    case ReasoningState::kExpectThink:
      if (id == m_.think_start) {
        state_ = ReasoningState::kReasoning;
        ++reasoning_tokens_;
        return Route::kMarker;
      }
      // The model answered without thinking; a stray </think> is still a marker, not text.
      state_ = ReasoningState::kContent;
      return id == m_.think_end ? Route::kMarker : Route::kContent;
    case ReasoningState::kReasoning:
      if (id == m_.think_end) {
        state_ = ReasoningState::kContent;
        ++reasoning_tokens_;
        return Route::kMarker;
      }
      if (implicit) {  // Kimi: a tool section ends reasoning without </think>
        state_ = ReasoningState::kContent;
        return Route::kContent;
      }
      ++reasoning_tokens_;
      return id == m_.think_start ? Route::kMarker : Route::kReasoning;
    case ReasoningState::kContent:
      // Markers after the answer started are control tokens, never visible text.
      return (id == m_.think_start || id == m_.think_end) ? Route::kMarker : Route::kContent;
  }
  return Route::kContent;
}

}  // namespace tessera::text
