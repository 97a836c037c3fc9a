#include "text/reasoning/output_parser.h"

namespace tessera::text {

void OutputDelta::append(OutputDelta&& o) {
  content += o.content;
  reasoning += o.reasoning;
  for (auto& t : o.tool_calls) tool_calls.push_back(std::move(t));
}

OutputParser::OutputParser(const Tokenizer& tokenizer, OutputParserOptions options)
    : tok_(tokenizer),
      opt_(std::move(options)),
      reasoning_(opt_.reasoning, opt_.start),
      tools_(opt_.tools, opt_.tool_call_id_prefix, opt_.tool_names) {}

OutputParser::Segment OutputParser::current_segment() const {
  if (reasoning_.state() == ReasoningState::kReasoning) return Segment::kReasoning;
  return tools_.in_section() ? Segment::kTool : Segment::kContent;
}

void OutputParser::route_text(Segment seg, std::string text, OutputDelta& out) {
  if (text.empty()) return;
  switch (seg) {
    case Segment::kReasoning:
      reasoning_text_ += text;
      out.reasoning += text;
      break;
    case Segment::kContent:
      content_ += text;
      out.content += text;
      break;
    case Segment::kTool:
      tools_.on_text(text, out.tool_calls);
      break;
  }
}

void OutputParser::flush_segment(OutputDelta& out) {
  if (!detok_) return;
  std::string rest = detok_->finish();
  if (detok_segment_ == Segment::kContent && detok_->stopped()) {
    stopped_ = true;
    stop_string_ = detok_->stop_string();
  }
  const Segment seg = detok_segment_;
  detok_.reset();
  route_text(seg, std::move(rest), out);
}

OutputDelta OutputParser::add(int32_t id) {
  OutputDelta out;
  if (stopped_ || finished_) return out;
  // Padding rows of the model's vocabulary (DeepSeek-V3: 129280 logits, 128815 tokenizer ids) have
  // no text; a sampled one contributes nothing, as in the reference decoders' "skip unknown".
  if (!tok_.has_id(id)) return out;
  const Segment before = current_segment();
  const ReasoningParser::Route route = reasoning_.feed(id);
  const bool tool_marker = opt_.tools.is_marker(id) && route != ReasoningParser::Route::kReasoning;
  if (route == ReasoningParser::Route::kMarker || tool_marker) {
    // A marker ends the current text segment: its held-back text belongs before the marker.
    detok_segment_ = detok_ ? detok_segment_ : before;
    flush_segment(out);
    if (stopped_) return out;
    if (tool_marker) tools_.on_marker(id, out.tool_calls);
    return out;
  }
  const Segment seg = current_segment();
  if (detok_ && detok_segment_ != seg) flush_segment(out);
  if (stopped_) return out;
  if (!detok_) {
    DetokenizerOptions d;
    d.skip_special_tokens = opt_.skip_special_tokens;
    if (seg == Segment::kContent) {
      d.stop_strings = opt_.stop_strings;
      d.include_stop_string = opt_.include_stop_string;
    }
    detok_ = std::make_unique<IncrementalDetokenizer>(tok_, d);
    detok_segment_ = seg;
  }
  std::string text = detok_->add(id);
  if (detok_->stopped()) {
    stopped_ = true;
    stop_string_ = detok_->stop_string();
  }
  route_text(seg, std::move(text), out);
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  if (finished_) return out;
  flush_segment(out);
  finished_ = true;
  tool_call_cut_ = tools_.finish();
  return out;
}

}  // namespace tessera::text
