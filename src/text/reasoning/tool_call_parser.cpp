#include "text/reasoning/tool_call_parser.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace tessera::text {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

constexpr std::string_view kFenceOpen = "```json\n";
constexpr std::string_view kFenceClose = "\n```";

}  // namespace

bool ToolCallMarkers::is_marker(int32_t id) const {
  if (format == ToolCallFormat::kNone || id < 0) return false;
  return contains(section_begin, id) || contains(section_end, id) || id == call_begin || id == call_end ||
         id == argument_begin || id == sep;
}

bool ToolCallMarkers::starts_section(int32_t id) const {
  return format != ToolCallFormat::kNone && (contains(section_begin, id) || id == call_begin);
}

ToolCallMarkers find_tool_call_markers(const Tokenizer& tok) {
  ToolCallMarkers m;
  auto id = [&](const char* s) { return tok.token_to_id(s).value_or(-1); };
  if (id("<|tool_calls_section_begin|>") >= 0 && id("<|tool_call_begin|>") >= 0) {
    m.format = ToolCallFormat::kKimiK2;
    for (const char* s : {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"})
      if (id(s) >= 0) m.section_begin.push_back(id(s));
    for (const char* s : {"<|tool_calls_section_end|>", "<|tool_call_section_end|>"})
      if (id(s) >= 0) m.section_end.push_back(id(s));
    m.call_begin = id("<|tool_call_begin|>");
    m.call_end = id("<|tool_call_end|>");
    m.argument_begin = id("<|tool_call_argument_begin|>");
  } else if (id("<｜tool▁calls▁begin｜>") >= 0 && id("<｜tool▁sep｜>") >= 0) {
    m.format = ToolCallFormat::kDeepSeekV3;
    m.section_begin.push_back(id("<｜tool▁calls▁begin｜>"));
    m.section_end.push_back(id("<｜tool▁calls▁end｜>"));
    m.call_begin = id("<｜tool▁call▁begin｜>");
    m.call_end = id("<｜tool▁call▁end｜>");
    m.sep = id("<｜tool▁sep｜>");
  }
  return m;
}

void ToolCallParser::on_marker(int32_t id, std::vector<ToolCallDelta>& out) {
  if (contains(m_.section_begin, id)) {
    if (state_ == State::kOutside) state_ = State::kSection;
    return;
  }
  if (contains(m_.section_end, id)) {
    if (state_ == State::kArgs) emit_args(true, out), calls_.push_back(current_);
    state_ = State::kOutside;
    return;
  }
  if (id == m_.call_begin) {
    if (state_ == State::kArgs) {  // a missing end marker: close the previous call first
      emit_args(true, out);
      calls_.push_back(current_);
    }
    state_ = State::kHeader;
    header_.clear();
    after_sep_ = false;
    return;
  }
  if (id == m_.argument_begin && state_ == State::kHeader && m_.format == ToolCallFormat::kKimiK2) {
    // The id is complete: functions.NAME:IDX (kept verbatim, Kimi's ids are conversation-global),
    // NAME:IDX, or a bare NAME (given a Kimi-style id).
    const std::string hid = trim(header_);
    std::string name = hid;
    const size_t colon = hid.rfind(':');
    if (colon != std::string::npos && is_digits(std::string_view(hid).substr(colon + 1))) name = hid.substr(0, colon);
    if (name.rfind("functions.", 0) == 0) name = name.substr(10);
    auto known = [&](const std::string& n) {
      return std::find(tool_names_.begin(), tool_names_.end(), n) != tool_names_.end();
    };
    if (!tool_names_.empty() && !known(name)) {
      // "functionsexec5": the separators were lost; strip the prefix and the call number.
      std::string n = hid.rfind("functions", 0) == 0 ? hid.substr(9) : hid;
      while (!n.empty() && (std::isdigit(static_cast<unsigned char>(n.back())) || n.back() == ':')) n.pop_back();
      if (known(n)) name = n;
    }
    current_ = ToolCall{hid, name, ""};
    if (name == hid) current_.id = fmt::format("functions.{}:{}", name, started_);
    open_call_args(out);
    return;
  }
  if (id == m_.sep && state_ == State::kHeader && m_.format == ToolCallFormat::kDeepSeekV3) {
    after_sep_ = true;
    raw_args_.clear();
    // V3.1 "NAME<sep>ARGS": the text before the separator is the name, not "function".
    const std::string type = trim(header_);
    if (!type.empty() && type != "function") {
      current_ = ToolCall{fmt::format("{}{}", id_prefix_, started_), type, ""};
      header_ = "\x01v31";  // marks the V3.1 form: arguments follow directly
      open_call_args(out);
    }
    return;
  }
  if (id == m_.call_end) {
    if (state_ == State::kArgs) {
      emit_args(true, out);
      calls_.push_back(current_);
    }
    state_ = State::kSection;
  }
}

void ToolCallParser::open_call_args(std::vector<ToolCallDelta>& out) {
  ToolCallDelta d;
  d.index = started_++;
  d.id = current_.id;
  d.name = current_.name;
  out.push_back(std::move(d));
  state_ = State::kArgs;
  raw_args_.clear();
  emitted_ = 0;
}

void ToolCallParser::on_text(const std::string& text, std::vector<ToolCallDelta>& out) {
  switch (state_) {
    case State::kOutside:
    case State::kSection:
      return;  // whitespace between calls
    case State::kHeader:
      if (m_.format == ToolCallFormat::kDeepSeekV3 && after_sep_) {
        // "function<sep>NAME\n```json\n...": the name ends at the first newline.
        raw_args_ += text;
        const size_t nl = raw_args_.find('\n');
        if (nl == std::string::npos) return;
        current_ = ToolCall{fmt::format("{}{}", id_prefix_, started_), trim(raw_args_.substr(0, nl)), ""};
        std::string rest = raw_args_.substr(nl + 1);
        open_call_args(out);
        raw_args_ = std::move(rest);
        emit_args(false, out);
      } else {
        header_ += text;
      }
      return;
    case State::kArgs:
      raw_args_ += text;
      emit_args(false, out);
      return;
  }
}

// The part of the raw argument text that is final: surrounding whitespace trimmed (and DeepSeek's
// ```json fence removed); text that may still turn out to be trailing is held back until `final`.
std::string ToolCallParser::visible_args(bool final) const {
  std::string_view s = raw_args_;
  const bool fenced = m_.format == ToolCallFormat::kDeepSeekV3;
  size_t b = 0;
  while (b < s.size() && is_space(s[b])) ++b;
  s = s.substr(b);
  if (fenced) {
    if (s.substr(0, std::min(s.size(), kFenceOpen.size())) ==
        kFenceOpen.substr(0, std::min(s.size(), kFenceOpen.size()))) {
      if (s.size() < kFenceOpen.size() && !final) return "";
      s = s.substr(std::min(s.size(), kFenceOpen.size()));
    }
  }
  size_t e = s.size();
  if (fenced) {
    if (final && s.size() >= 3 && s.substr(s.size() - 3) == "```") e = s.size() - 3;
    // While streaming, hold back a tail that could be the start of the closing fence.
    if (!final)
      for (size_t k = std::min(kFenceClose.size(), s.size()); k > 0; --k)
        if (s.substr(s.size() - k) == kFenceClose.substr(0, k)) {
          e = s.size() - k;
          break;
        }
  }
  while (e > 0 && is_space(s[e - 1])) --e;
  return std::string(s.substr(0, e));
}

void ToolCallParser::emit_args(bool final, std::vector<ToolCallDelta>& out) {
  // visible_args() only ever grows (held-back text is a prefix of what follows), so the new part
  // is the suffix past what was already emitted.
  std::string v = visible_args(final);
  if (v.size() > emitted_) {
    ToolCallDelta d;
    d.index = started_ - 1;
    d.arguments = v.substr(emitted_);
    emitted_ = v.size();
    out.push_back(std::move(d));
  }
  current_.arguments = std::move(v);
}

bool ToolCallParser::finish() {
  const bool cut = state_ == State::kArgs || state_ == State::kHeader;
  state_ = State::kOutside;
  return cut;
}

}  // namespace tessera::text
