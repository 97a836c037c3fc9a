#include "server/chat_messages.h"

#include "server/api_error.h"
#include "server/json_fields.h"

namespace tessera::server {

namespace {

std::string join_text_parts(const OJson& content, const std::string& where) {
  std::string out;
  bool first = true;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(where, "{}: each content part must be an object with a 'type'", where);
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad_request(where, "{}: content part type '{}' is not supported (text only)", where, type);
    if (!part.contains("text") || !part["text"].is_string())
      bad_request(where, "{}: a text part needs a string 'text'", where);
    if (!first) out += "\n";
    out += part["text"].get<std::string>();
    first = false;
  }
  return out;
}

}  // namespace

OJson normalize_messages(const OJson& msgs) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
  if (!msgs.is_array()) bad_request("messages", "'messages' must be an array");
  if (msgs.empty()) bad_request("messages", "'messages' must not be empty");
  if (msgs.size() > 4096) bad_request("messages", "at most 4096 messages are allowed");
  OJson out = OJson::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const OJson& m = msgs[i];
    if (!m.is_object()) bad_request(where, "{} must be an object", where);
    if (!m.contains("role") || !m["role"].is_string()) bad_request(where + ".role", "{}.role must be a string", where);
    const std::string role = m["role"].get<std::string>();
    if (!kRoles.count(role))
      bad_request(where + ".role", "{}.role '{}' is not one of system, developer, user, assistant, tool", where, role);
    OJson n = m;
    // OpenAI's newer name for system instructions; the chat templates know only "system", and a
    // role they do not know is dropped by most of them.
    if (role == "developer") n["role"] = "system";
    const bool has_tool_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!m.contains("content") || m["content"].is_null()) {
      if (role != "assistant") bad_request(where + ".content", "{}.content is required for role '{}'", where, role);
      if (!has_tool_calls && !m.contains("reasoning_content") && !m.contains("reasoning"))
        bad_request(where + ".content", "{}: an assistant message needs content or tool_calls", where);
      n["content"] = nullptr;
    } else if (m["content"].is_array()) {
      n["content"] = join_text_parts(m["content"], where + ".content");
    } else if (!m["content"].is_string()) {
      bad_request(where + ".content", "{}.content must be a string, an array of text parts or null", where);
    }
    if (has_tool_calls) {
      if (role != "assistant") bad_request(where + ".tool_calls", "{}: only assistant messages have tool_calls", where);
      if (!m["tool_calls"].is_array()) bad_request(where + ".tool_calls", "{}.tool_calls must be an array", where);
      OJson calls = OJson::array();
      for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
        const std::string w = fmt::format("{}.tool_calls[{}]", where, k);
        OJson c = m["tool_calls"][k];
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          bad_request(w, "{} must be an object with a 'function'", w);
        OJson& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string())
          bad_request(w + ".function.name", "{}.function.name must be a string", w);
        if (!f.contains("arguments") || f["arguments"].is_null())
          f["arguments"] = "{}";
        else if (f["arguments"].is_object())
          f["arguments"] = f["arguments"].dump();
        else if (!f["arguments"].is_string())
          bad_request(w + ".function.arguments", "{}.function.arguments must be a JSON string", w);
        if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null())
          bad_request(w + ".id", "{}.id must be a string", w);
        if (!c.contains("type")) c["type"] = "function";
        calls.push_back(std::move(c));
      }
      n["tool_calls"] = std::move(calls);
    }
    if (role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string())
      bad_request(where + ".tool_call_id", "{}.tool_call_id must be a string", where);
    // Accept both reasoning field names on input; the templates read reasoning_content.
    if (n.contains("reasoning") && !n.contains("reasoning_content")) n["reasoning_content"] = n["reasoning"];
    n.erase("reasoning");
    if (n.contains("reasoning_content") && n["reasoning_content"].is_null()) n.erase("reasoning_content");
    if (n.contains("reasoning_content") && !n["reasoning_content"].is_string())
      bad_request(where + ".reasoning_content", "{}.reasoning_content must be a string", where);
    out.push_back(std::move(n));
  }
  return out;
}

OJson validate_tools(const OJson& b, std::set<std::string>& names) {
  const OJson* t = field(b, "tools");
  if (!t) return OJson();
  if (!t->is_array()) bad_request("tools", "'tools' must be an array");
  if (t->size() > 512) bad_request("tools", "at most 512 tools are allowed");
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const OJson& x = (*t)[i];
    if (!x.is_object() || x.value("type", std::string("function")) != "function")
      bad_request(w, "{} must be an object of type 'function'", w);
    if (!x.contains("function") || !x["function"].is_object())
      bad_request(w + ".function", "{}.function must be an object", w);
    const OJson& f = x["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      bad_request(w + ".function.name", "{}.function.name must be a non-empty string", w);
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      bad_request(w + ".function.parameters", "{}.function.parameters must be a JSON Schema object", w);
    names.insert(f["name"].get<std::string>());
  }
  return t->empty() ? OJson() : *t;
}

}  // namespace tessera::server
