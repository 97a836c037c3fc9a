// Whether a model's chat template shows tools to the model, and the repair when it does not.
//
// DeepSeek-V3/R1's official templates never render `tools` (the model is not told which functions
// exist: prompt_tokens is the same with and without them) and drop the calls of an assistant turn
// that also has text (what tessera returns and what LangChain sends back). The template is probed
// once at start-up with a conversation that carries unique names; where the probe finds either
// gap and the model's own call syntax is known (DeepSeek-V3), each conversation is rewritten before
// rendering: the tool declarations become a system message in DeepSeek's own wording, and the
// calls of assistant turns become their text in the syntax the model emits, so the template renders
// exactly what the model wrote. Templates that render both are left alone.
#pragma once

#include <string>

#include "text/reasoning/tool_call_parser.h"
#include "text/template/chat_template.h"

namespace tessera::server {

struct ToolRendering {
  bool declares_tools = true;         // the template puts the `tools` it is given in the prompt
  bool keeps_calls_with_text = true;  // an assistant turn with content and tool_calls keeps both
  // The rewrite tessera applies (false: none needed, or the model's call syntax is unknown).
  bool rewrite = false;
  // One line for the start-up log and `tessera plan`: what the template does and what tessera adds.
  std::string describe() const;
};

// Probes `tmpl` (the template used for requests with tools) with the model's BOS/EOS; `format` is
// the call syntax of the model's vocabulary.
ToolRendering probe_tool_rendering(const text::ChatTemplate& tmpl, const text::ChatRenderInput& specials,
                                   text::ToolCallFormat format);

// Rewrites `input` (normalized messages: tool-call arguments are JSON strings) as `r` says; no-op
// when r.rewrite is false.
void rewrite_for_template(const ToolRendering& r, text::ChatRenderInput& input);

}  // namespace tessera::server
