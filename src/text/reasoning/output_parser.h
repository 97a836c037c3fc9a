// The output side of one generated sample: token ids in, OpenAI-style deltas out (content,
// reasoning, tool calls). Marker tokens (<think>, tool-call markers) are routed by the token-level
// state machines and never decoded into visible text; the text between markers is decoded
// incrementally per segment, so a code point or a stop-string candidate held back at the end of
// the reasoning is released into the reasoning, not into the answer. Stop strings apply to the
// visible content only (a stop string inside the reasoning does not end the answer before it began).
//
// The server builds both streamed chunks and non-streamed responses from these deltas, so the two
// are identical by construction.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/reasoning/reasoning_parser.h"
#include "text/reasoning/tool_call_parser.h"
#include "text/tokenizer/detokenizer.h"

namespace tessera::text {

struct OutputParserOptions {
  ReasoningMarkers reasoning;
  ReasoningState start = ReasoningState::kContent;
  ToolCallMarkers tools;  // format kNone: no tool parsing (tool markers stay text)
  bool skip_special_tokens = true;
  std::vector<std::string> stop_strings;
  bool include_stop_string = false;
  std::string tool_call_id_prefix = "call_";  // DeepSeek calls: prefix + call number
  std::vector<std::string> tool_names;        // the request's tools (name recovery)
};

struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  void append(OutputDelta&& o);
};

class OutputParser {
 public:
  // `tokenizer` must outlive the parser.
  OutputParser(const Tokenizer& tokenizer, OutputParserOptions options);

  // Feeds one generated token; ids the tokenizer does not know (padding rows) add no text.
  OutputDelta add(int32_t id);
  // End of generation: flushes held text; a tool call cut short is dropped (see tool_call_cut()).
  OutputDelta finish();

  bool stopped() const { return stopped_; }  // a stop string matched in the content
  // The stop string that matched ("" before a stop): Anthropic's stop_sequence names it.
  const std::string& stop_string() const { return stop_string_; }
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_text_; }
  const std::vector<ToolCall>& tool_calls() const { return tools_.calls(); }
  bool tool_call_cut() const { return tool_call_cut_; }
  int64_t reasoning_tokens() const { return reasoning_.reasoning_tokens(); }
  ReasoningState reasoning_state() const { return reasoning_.state(); }

 private:
  enum class Segment { kReasoning, kContent, kTool };
  void flush_segment(OutputDelta& out);
  void route_text(Segment seg, std::string text, OutputDelta& out);
  Segment current_segment() const;

  const Tokenizer& tok_;
  OutputParserOptions opt_;
  ReasoningParser reasoning_;
  ToolCallParser tools_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  Segment detok_segment_ = Segment::kContent;
  std::string content_, reasoning_text_, stop_string_;
  bool stopped_ = false, finished_ = false, tool_call_cut_ = false;
};

}  // namespace tessera::text
