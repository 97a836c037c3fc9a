#include "server/tool_rendering.h"

#include <fmt/format.h>

#include <exception>

namespace tessera::server {

namespace {

using OJson = nlohmann::ordered_json;

// Names no real conversation contains: the probe looks for them in the rendered prompt.
constexpr const char* kProbeTool = "tessera_probe_declared_tool";
constexpr const char* kProbeCall = "tessera_probe_called_tool";
constexpr const char* kProbeText = "tessera_probe_assistant_text";

// The declarations in DeepSeek's own wording (DeepSeek-V3.1's template, whose models were trained
// on it), with the call syntax of V3/R1 that their templates render for earlier calls and that
// the tool-call parser reads. Written as a template so `tojson` prints the parameters as
// json.dumps does, like every template tessera renders.
constexpr const char* kDeepSeekDeclarations =
    "{{ '## Tools\\nYou have access to the following tools:\\n' }}"
    "{% for tool in tools %}"
    "{{ '\\n### ' + tool.function.name + '\\nDescription: ' }}"
    "{% if tool.function.description is defined %}{{ tool.function.description }}{% endif %}"
    "{{ '\\n\\nParameters: ' }}"
    "{% if tool.function.parameters is defined %}{{ tool.function.parameters | tojson }}{% else %}{{ '{}' }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{{ '\\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_call_name\\n```json\\n"
    "tool_call_arguments\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\\n\\nWhere:\\n\\n"
    "- `tool_call_name` must be an exact match to one of the available tools\\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the Parameters Schema of that tool\\n"
    "- For multiple tool calls, put each <｜tool▁call▁begin｜>...<｜tool▁call▁end｜> on a new line inside "
    "one <｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>\\n' }}";

// An assistant turn's calls as DeepSeek-V3 writes them (the official template's rendering of
// several calls, closed as the model closes them).
std::string deepseek_calls_text(const OJson& calls) {
  std::string out = "<｜tool▁calls▁begin｜>";
  bool first = true;
  for (const auto& c : calls) {
    const OJson& f = c.at("function");
    if (!first) out += "\n";
    first = false;
    out += fmt::format("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{}\n```json\n{}\n```<｜tool▁call▁end｜>",
                       f.at("name").get<std::string>(), f.at("arguments").get<std::string>());
  }
  return out + "<｜tool▁calls▁end｜>";
}

bool renders_all(const text::ChatTemplate& t, const text::ChatRenderInput& in, std::initializer_list<const char*> s) {
  std::string out;
  try {
    out = t.render(in);
  } catch (const std::exception&) {
    return false;  // a template that fails on the probe does not render it either
  }
  for (const char* x : s)
    if (out.find(x) == std::string::npos) return false;
  return true;
}

}  // namespace

std::string ToolRendering::describe() const {
  if (declares_tools && keeps_calls_with_text) return "the chat template renders tools and tool calls";
  std::string gaps = !declares_tools && !keeps_calls_with_text
                         ? "ignores `tools` and drops the calls of assistant turns that also have text"
                     : !declares_tools ? "ignores `tools`"
                                       : "drops the calls of assistant turns that also have text";
  return rewrite ? fmt::format(
                       "the chat template {}: tessera adds the tool declarations as a system message "
                       "and writes assistant calls in DeepSeek-V3's syntax",
                       gaps)
                 : fmt::format(
                       "the chat template {}; tessera knows no repair for this model's tool syntax, pass "
                       "--chat-template with one that renders tools",
                       gaps);
}

ToolRendering probe_tool_rendering(const text::ChatTemplate& tmpl, const text::ChatRenderInput& specials,
                                   text::ToolCallFormat format) {
  text::ChatRenderInput in = specials;
  in.add_generation_prompt = true;
  in.messages = OJson::array({OJson{{"role", "user"}, {"content", "hello"}}});
  in.tools = OJson::array(
      {OJson{{"type", "function"},
             {"function", OJson{{"name", kProbeTool},
                                {"description", "probe"},
                                {"parameters", OJson{{"type", "object"}, {"properties", OJson::object()}}}}}}});
  ToolRendering r;
  r.declares_tools = renders_all(tmpl, in, {kProbeTool});
  const OJson call{
      {"id", "call_0"}, {"type", "function"}, {"function", OJson{{"name", kProbeCall}, {"arguments", "{}"}}}};
  in.messages.push_back(OJson{{"role", "assistant"}, {"content", kProbeText}, {"tool_calls", OJson::array({call})}});
  in.messages.push_back(OJson{{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "done"}});
  r.keeps_calls_with_text = renders_all(tmpl, in, {kProbeText, kProbeCall});
  r.rewrite = (!r.declares_tools || !r.keeps_calls_with_text) && format == text::ToolCallFormat::kDeepSeekV3;
  return r;
}

void rewrite_for_template(const ToolRendering& r, text::ChatRenderInput& input) {
  if (!r.rewrite) return;
  if (!r.declares_tools && input.tools.is_array() && !input.tools.empty()) {
    text::ChatRenderInput decl;
    decl.tools = input.tools;
    const std::string text = text::ChatTemplate(kDeepSeekDeclarations).render(decl);
    // After the conversation's own system messages: DeepSeek's templates join them in order.
    size_t at = 0;
    while (at < input.messages.size() && input.messages[at].value("role", "") == "system") ++at;
    input.messages.insert(input.messages.begin() + static_cast<std::ptrdiff_t>(at),
                          OJson{{"role", "system"}, {"content", text}});
  }
  if (!r.keeps_calls_with_text) {
    for (auto& m : input.messages) {
      if (m.value("role", "") != "assistant") continue;
      auto it = m.find("tool_calls");
      if (it == m.end() || !it->is_array() || it->empty()) continue;
      const std::string text = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
      m["content"] = text + deepseek_calls_text(*it);
      m.erase("tool_calls");
    }
  }
}

}  // namespace tessera::server
