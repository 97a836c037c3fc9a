// Token-level tool-call parsers. Kimi-K2:
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS
//   <|tool_call_end|>...<|tool_calls_section_end|>
// (also the singular <|tool_call_section_begin|> spelling, a bare <|tool_call_begin|> without a
// section, and ids "NAME:IDX" or "NAME"). DeepSeek-V3:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   ...<｜tool▁calls▁end｜>   (and V3.1's NAME<｜tool▁sep｜>ARGS).
// Markers are single tokens, so the parser is driven by marker ids plus the decoded text between
// them. It emits OpenAI-style deltas: the first delta of a call carries index, id and name; later
// ones carry argument text. Argument text is emitted as soon as it is known to be final (leading
// and trailing whitespace or a closing code fence is held back), so the concatenated deltas equal
// the complete call exactly: streamed and non-streamed results agree by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tessera::text {

enum class ToolCallFormat { kNone, kKimiK2, kDeepSeekV3 };

struct ToolCallMarkers {
  ToolCallFormat format = ToolCallFormat::kNone;
  std::vector<int32_t> section_begin, section_end;  // both spellings for Kimi
  int32_t call_begin = -1, call_end = -1;
  int32_t argument_begin = -1;  // Kimi <|tool_call_argument_begin|>
  int32_t sep = -1;             // DeepSeek <｜tool▁sep｜>
  bool is_marker(int32_t id) const;
  bool starts_section(int32_t id) const;  // section begin or a bare call begin
};

// Detects the format from the vocabulary (kNone when neither marker set exists).
ToolCallMarkers find_tool_call_markers(const Tokenizer& tok);

struct ToolCall {
  std::string id, name, arguments;
};

struct ToolCallDelta {
  int64_t index = 0;
  std::optional<std::string> id, name;  // set on the first delta of a call
  std::string arguments;
};

class ToolCallParser {
 public:
  // `id_prefix`: ids of formats without their own (DeepSeek) are id_prefix + call number.
  // `tool_names`: the request's tools; a Kimi id whose name is not among them is matched against
  // the mangled forms models emit ("functionsexec5" for functions.exec:5).
  explicit ToolCallParser(ToolCallMarkers markers, std::string id_prefix = "call_",
                          std::vector<std::string> tool_names = {})
      : m_(std::move(markers)), id_prefix_(std::move(id_prefix)), tool_names_(std::move(tool_names)) {}

  // True while text belongs to the tool section (not to the visible content).
  bool in_section() const { return state_ != State::kOutside; }
  void on_marker(int32_t id, std::vector<ToolCallDelta>& out);
  void on_text(const std::string& text, std::vector<ToolCallDelta>& out);
  // End of generation: a call cut short (no end marker) is dropped from calls(); returns whether
  // one was.
  bool finish();

  const std::vector<ToolCall>& calls() const { return calls_; }
  bool any_started() const { return started_ > 0; }

 private:
  enum class State { kOutside, kSection, kHeader, kArgs };
  void open_call_args(std::vector<ToolCallDelta>& out);
  void emit_args(bool final, std::vector<ToolCallDelta>& out);
  std::string visible_args(bool final) const;

  ToolCallMarkers m_;
  std::string id_prefix_;
  std::vector<std::string> tool_names_;
  State state_ = State::kOutside;
  std::string header_;  // Kimi: the call id; DeepSeek: the type before <｜tool▁sep｜> then the name
  bool after_sep_ = false;
  std::string raw_args_;
  size_t emitted_ = 0;
  int64_t started_ = 0;
  ToolCall current_;
  std::vector<ToolCall> calls_;
};

}  // namespace tessera::text
