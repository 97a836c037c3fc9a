#include "server/anthropic_messages.h"

#include <cstdint>
#include <set>

#include "server/api_error.h"
#include "server/http_wire.h"
#include "server/json_fields.h"

namespace tessera::server {
namespace {

const std::string& block_type(const OJson& block, const std::string& where) {
  return type_member(block, where, "a content block object");
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& where) {
  if (type == "image" || type == "document")
    bad_request(where + ".type", "{}: '{}' content is not supported: this server serves a text-only model", where,
                type);
  bad_request(where + ".type", "{}: content block type '{}' is not supported here", where, type);
}

// A string, or an array of text blocks joined with newlines (as the chat path joins text parts).
std::string text_of(const OJson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(where, "{} must be a string or an array of text blocks", where);
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = fmt::format("{}[{}]", where, k);
    const std::string& type = block_type(content[k], w);
    if (type != "text") unsupported_block(type, w);
    if (k) out += "\n";
    out += required_string(content[k], "text", w, false);
  }
  return out;
}

// A user turn: text blocks become user messages, each tool_result a tool message, in block order
// (OpenAI-shaped templates want the tool messages right after the assistant's tool calls).
void user_turn(const OJson& content, const std::string& where, const std::set<std::string>& tool_use_ids, OJson& out) {
  if (content.is_string()) {
    out.push_back(OJson{{"role", "user"}, {"content", content}});
    return;
  }
  std::string text;
  bool has_text = false;
  auto flush = [&] {
    if (has_text) out.push_back(OJson{{"role", "user"}, {"content", text}});
    text.clear();
    has_text = false;
  };
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = fmt::format("{}[{}]", where, k);
    const OJson& b = content[k];
    const std::string& type = block_type(b, w);
    if (type == "text") {
      if (has_text) text += "\n";
      text += required_string(b, "text", w, false);
      has_text = true;
    } else if (type == "tool_result") {
      const std::string& id = required_string(b, "tool_use_id", w, true);
      if (!tool_use_ids.count(id))
        bad_request(w + ".tool_use_id", "{}.tool_use_id '{}' names no tool_use block of an earlier assistant turn", w,
                    excerpt(id, 80));
      std::string result;
      if (const OJson* c = field(b, "content")) result = text_of(*c, w + ".content");
      // The model sees the failure in the result itself: the templates have no error flag.
      if (auto e = get_bool(b, "is_error"); e && *e) result = "Error: " + result;
      flush();
      out.push_back(OJson{{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else {
      unsupported_block(type, w);
    }
  }
  flush();
}

// An assistant turn: text blocks joined into content, thinking blocks into reasoning_content
// (their signature is not checked: nothing here signs), tool_use blocks into tool_calls.
void assistant_turn(const OJson& content, const std::string& where, std::set<std::string>& tool_use_ids, OJson& out) {
  OJson m{{"role", "assistant"}};
  if (content.is_string()) {
    m["content"] = content;
    out.push_back(std::move(m));
    return;
  }
  std::string text, reasoning;
  bool has_reasoning = false;
  OJson calls = OJson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = fmt::format("{}[{}]", where, k);
    const OJson& b = content[k];
    const std::string& type = block_type(b, w);
    if (type == "text") {
      text += required_string(b, "text", w, false);
    } else if (type == "thinking") {
      reasoning += required_string(b, "thinking", w, false);
      has_reasoning = true;
    } else if (type == "redacted_thinking") {
      // Encrypted reasoning of another server: nothing this model could read.
    } else if (type == "tool_use") {
      const std::string& id = required_string(b, "id", w, true);
      const std::string& name = required_string(b, "name", w, true);
      auto in = b.find("input");
      if (in == b.end() || !in->is_object()) bad_request(w + ".input", "{}.input must be an object", w);
      tool_use_ids.insert(id);
      calls.push_back(
          OJson{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", dump(*in)}}}});
    } else {
      unsupported_block(type, w);
    }
  }
  m["content"] = (text.empty() && (!calls.empty() || has_reasoning)) ? OJson() : OJson(text);
  if (has_reasoning) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out.push_back(std::move(m));
}

void translate_messages(const OJson& msgs, OJson& out) {
  if (!msgs.is_array()) bad_request("messages", "'messages' must be an array");
  if (msgs.empty()) bad_request("messages", "'messages' must not be empty");
  std::set<std::string> tool_use_ids;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const OJson& m = msgs[i];
    if (!m.is_object()) bad_request(where, "{} must be an object", where);
    const std::string& role = required_string(m, "role", where, false);
    if (role != "user" && role != "assistant")
      bad_request(where + ".role", "{}.role must be 'user' or 'assistant', got '{}'{}", where, excerpt(role, 40),
                  role == "system" ? " (system instructions go in the top-level 'system')" : "");
    auto c = m.find("content");
    if (c == m.end() || !(c->is_string() || (c->is_array() && !c->empty())))
      bad_request(where + ".content", "{}.content must be a string or a non-empty array of content blocks", where);
    if (role == "user")
      user_turn(*c, where + ".content", tool_use_ids, out);
    else
      assistant_turn(*c, where + ".content", tool_use_ids, out);
  }
  // Anthropic continues a final assistant message ("prefill"); the chat templates would close it
  // and start a new turn instead, which is not what the client asked for.
  if (msgs.back().value("role", std::string()) == "assistant")
    bad_request(fmt::format("messages[{}].role", msgs.size() - 1),
                "messages[{}]: a final assistant message (prefill) is not supported; end with a user message",
                msgs.size() - 1);
}

// tools[i] {name, description, input_schema} -> {"type":"function","function":{...}}.
OJson translate_tools(const OJson& tools, std::set<std::string>& names) {
  if (!tools.is_array()) bad_request("tools", "'tools' must be an array");
  OJson out = OJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const OJson& t = tools[i];
    if (!t.is_object()) bad_request(w, "{} must be an object", w);
    if (auto type = t.find("type"); type != t.end() && !type->is_null() && *type != "custom")
      bad_request(w + ".type",
                  "{}.type '{}': Anthropic's server and built-in tools are not supported; define a custom tool "
                  "with name, description and input_schema",
                  w, type->is_string() ? excerpt(type->get<std::string>(), 60) : type->dump());
    OJson f{{"name", required_string(t, "name", w, true)}};
    if (const OJson* d = field(t, "description")) {
      if (!d->is_string()) bad_request(w + ".description", "{}.description must be a string", w);
      f["description"] = *d;
    }
    auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object())
      bad_request(w + ".input_schema", "{}.input_schema must be a JSON Schema object", w);
    f["parameters"] = *schema;
    names.insert(f["name"].get<std::string>());
    out.push_back(OJson{{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

OJson translate_tool_choice(const OJson& tc, const std::set<std::string>& names) {
  if (!tc.is_object()) bad_request("tool_choice", "'tool_choice' must be an object with a 'type'");
  const std::string& type = required_string(tc, "type", "tool_choice", true);
  if (type == "auto") return "auto";
  if (type == "any") return "required";
  if (type == "none") return "none";
  if (type != "tool")
    bad_request("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got '{}'", excerpt(type, 40));
  const std::string& name = required_string(tc, "name", "tool_choice", true);
  if (!names.count(name))
    bad_request("tool_choice.name", "tool_choice.name '{}' is not the name of a tool in 'tools'", excerpt(name, 80));
  return OJson{{"type", "function"}, {"function", {{"name", name}}}};
}

// thinking {type: enabled, budget_tokens} / {type: disabled} -> the chat path's thinking switch and
// reasoning-token budget.
void translate_thinking(const OJson& t, const OJson& max_tokens, OJson& out) {
  if (!t.is_object()) bad_request("thinking", "'thinking' must be an object with a 'type'");
  const std::string& type = required_string(t, "type", "thinking", true);
  if (type == "disabled") {
    out["chat_template_kwargs"] = OJson{{"thinking", false}};
    return;
  }
  if (type != "enabled")
    bad_request("thinking.type", "thinking.type must be 'enabled' or 'disabled', got '{}'", excerpt(type, 40));
  out["chat_template_kwargs"] = OJson{{"thinking", true}};
  const OJson* b = field(t, "budget_tokens");
  if (!b) bad_request("thinking.budget_tokens", "thinking.budget_tokens is required when thinking is enabled");
  if (!b->is_number_integer() || b->get<int64_t>() < 1)
    bad_request("thinking.budget_tokens", "thinking.budget_tokens must be a positive integer");
  // As Anthropic requires: the budget is part of max_tokens, so it must leave room for the answer.
  const bool over = max_tokens.is_number_unsigned()  ? b->get<uint64_t>() >= max_tokens.get<uint64_t>()
                    : max_tokens.is_number_integer() ? b->get<int64_t>() >= max_tokens.get<int64_t>()
                                                     : false;  // a bad max_tokens is reported as such
  if (over)
    bad_request("thinking.budget_tokens", "thinking.budget_tokens ({}) must be less than max_tokens ({})",
                b->get<int64_t>(), max_tokens.get<int64_t>());
  out["thinking_token_budget"] = *b;
}

}  // namespace

OJson messages_to_chat_request(const OJson& b) {
  if (!b.is_object()) bad_request("", "the request body must be a JSON object");
  OJson out = OJson::object();
  if (const OJson* m = field(b, "model")) out["model"] = *m;
  const OJson* mt = field(b, "max_tokens");
  if (!mt) bad_request("max_tokens", "'max_tokens' is required");
  out["max_tokens"] = *mt;
  // Same names and meaning on both APIs: validated by the chat parser.
  for (const char* k : {"temperature", "top_p", "top_k", "stream", "tessera_script"})
    if (const OJson* v = field(b, k)) out[k] = *v;
  if (const OJson* s = field(b, "stop_sequences")) {
    if (!s->is_array()) bad_request("stop_sequences", "'stop_sequences' must be an array of strings");
    for (const auto& x : *s)
      if (!x.is_string()) bad_request("stop_sequences", "'stop_sequences' must be an array of strings");
    if (!s->empty()) out["stop"] = *s;
  }
  if (const OJson* md = field(b, "metadata"); md && !md->is_object())
    bad_request("metadata", "'metadata' must be an object");

  OJson messages = OJson::array();
  if (const OJson* sys = field(b, "system")) {
    const std::string text = text_of(*sys, "system");
    if (!text.empty()) messages.push_back(OJson{{"role", "system"}, {"content", text}});
  }
  if (!b.contains("messages")) bad_request("messages", "'messages' is required");
  translate_messages(b["messages"], messages);
  out["messages"] = std::move(messages);

  std::set<std::string> names;
  if (const OJson* t = field(b, "tools")) {
    OJson tools = translate_tools(*t, names);
    if (!tools.empty()) out["tools"] = std::move(tools);
  }
  if (const OJson* tc = field(b, "tool_choice")) {
    out["tool_choice"] = translate_tool_choice(*tc, names);
    if (names.empty() && out["tool_choice"] != "none") bad_request("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (const OJson* t = field(b, "thinking")) translate_thinking(*t, *mt, out);
  return out;
}

GenerationJob parse_messages_request(const OJson& body, const ServedModel& model, const ParseLimits& limits) {
  const OJson chat = messages_to_chat_request(body);
  try {
    return parse_chat_request(chat, model, limits);
  } catch (const ApiError& e) {
    // The few chat fields whose name differs from the Anthropic one they came from. An index into
    // the translated messages is not the client's index: those errors name 'messages' only.
    std::string p = e.param();
    if (p == "stop") p = "stop_sequences";
    if (p == "thinking_token_budget") p = "thinking.budget_tokens";
    if (p.rfind("chat_template_kwargs", 0) == 0) p = "thinking";
    if (p.rfind("messages[", 0) == 0) p = "messages";
    if (p.rfind("tools[", 0) == 0) p = "tools";
    std::string msg = e.what();
    if (e.param() == "stop") msg = "stop_sequences: " + msg;
    throw ApiError(e.status(), msg, p, e.code());
  }
}

int64_t count_message_tokens(const OJson& body, const ServedModel& model, const ParseLimits& limits) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  // Any max_tokens passes the translation (thinking.budget_tokens is checked against it); the
  // chat parser then gets 1, so only a prompt past the context is refused, as on /v1/messages.
  OJson b = body;
  b["max_tokens"] = INT64_MAX / 4;
  b.erase("stream");
  b.erase("tessera_script");
  OJson chat = messages_to_chat_request(b);
  chat["max_tokens"] = 1;
  chat.erase("thinking_token_budget");
  try {
    return static_cast<int64_t>(parse_chat_request(chat, model, limits).prompts.at(0).size());
  } catch (const ApiError& e) {
    throw ApiError(e.status(), e.what(), e.param().rfind("messages[", 0) == 0 ? "messages" : e.param(), e.code());
  }
}

OJson anthropic_error_json(int status, const std::string& message, const std::string& param) {
  const char* type = "api_error";
  switch (status) {
    case 400:
    case 405:
    case 422:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
    default:
      type = status >= 500 ? "api_error" : "invalid_request_error";
  }
  const bool named = param.empty() || message.find(param) != std::string::npos;
  return OJson{{"type", "error"},
               {"error", OJson{{"type", type}, {"message", named ? message : param + ": " + message}}}};
}

std::string anthropic_sse(const OJson& j) {
  return "event: " + j.value("type", std::string()) + "\ndata: " + dump(j) + "\n\n";
}

std::string anthropic_stop_reason(const std::optional<std::string>& finish_reason, bool tool_calls,
                                  const std::optional<std::string>& stop_string) {
  if (finish_reason == "length") return "max_tokens";
  if (tool_calls) return "tool_use";
  if (stop_string && !stop_string->empty()) return "stop_sequence";
  return "end_turn";
}

OJson tool_input(const std::string& arguments) {
  OJson in = OJson::parse(arguments, nullptr, false);
  if (in.is_discarded() || !in.is_object()) return arguments;
  return in;
}

OJson messages_response(const ResponseMeta& m, const ChoiceAccum& a, const Usage& u) {
  OJson content = OJson::array();
  if (!a.reasoning.empty())
    content.push_back(OJson{{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
  if (!a.content.empty()) content.push_back(OJson{{"type", "text"}, {"text", a.content}});
  for (const auto& [idx, tc] : a.tool_calls)
    content.push_back(
        OJson{{"type", "tool_use"}, {"id", tc.id}, {"name", tc.name}, {"input", tool_input(tc.arguments)}});
  const std::string reason = anthropic_stop_reason(a.finish_reason, !a.tool_calls.empty(), a.stop_string);
  return OJson{{"id", m.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", m.model},
               {"content", std::move(content)},
               {"stop_reason", reason},
               {"stop_sequence", reason == "stop_sequence" ? OJson(*a.stop_string) : OJson()},
               {"usage", OJson{{"input_tokens", u.prompt_tokens}, {"output_tokens", u.completion_tokens}}}};
}

std::string MessagesStream::start() const {
  OJson msg{{"id", meta_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", meta_.model},
            {"content", OJson::array()},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr},
            {"usage", OJson{{"input_tokens", input_tokens_}, {"output_tokens", 0}}}};
  return anthropic_sse(OJson{{"type", "message_start"}, {"message", std::move(msg)}}) +
         anthropic_sse(OJson{{"type", "ping"}});
}

std::string MessagesStream::open(Block b, OJson content_block) {
  std::string out = close();
  block_ = b;
  ++index_;
  return out + anthropic_sse(OJson{
                   {"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}});
}

std::string MessagesStream::close() {
  if (block_ == Block::kNone) return "";
  block_ = Block::kNone;
  return anthropic_sse(OJson{{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesStream::add(const ChoiceEvent& ev) {
  std::string out;
  auto delta = [&](OJson d) {
    out += anthropic_sse(OJson{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  };
  const text::OutputDelta& d = ev.delta;
  if (!d.reasoning.empty()) {
    if (block_ != Block::kThinking)
      out += open(Block::kThinking, OJson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    delta(OJson{{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.content.empty()) {
    if (block_ != Block::kText) out += open(Block::kText, OJson{{"type", "text"}, {"text", ""}});
    delta(OJson{{"type", "text_delta"}, {"text", d.content}});
  }
  for (const auto& t : d.tool_calls) {
    if (block_ != Block::kToolUse || t.index != tool_call_ || t.id || t.name) {
      out += open(Block::kToolUse, OJson{{"type", "tool_use"},
                                         {"id", t.id.value_or("")},
                                         {"name", t.name.value_or("")},
                                         {"input", OJson::object()}});
      tool_call_ = t.index;
      tool_calls_ = true;
    }
    if (!t.arguments.empty()) delta(OJson{{"type", "input_json_delta"}, {"partial_json", t.arguments}});
  }
  if (ev.finish_reason) finish_reason_ = ev.finish_reason;
  if (ev.stop_string) stop_string_ = ev.stop_string;
  return out;
}

std::string MessagesStream::finish(const Usage& u) {
  const std::string reason = anthropic_stop_reason(finish_reason_, tool_calls_, stop_string_);
  OJson d{{"stop_reason", reason}, {"stop_sequence", reason == "stop_sequence" ? OJson(*stop_string_) : OJson()}};
  return close() +
         anthropic_sse(OJson{{"type", "message_delta"},
                             {"delta", std::move(d)},
                             {"usage", OJson{{"output_tokens", u.completion_tokens}}}}) +
         anthropic_sse(OJson{{"type", "message_stop"}});
}

}  // namespace tessera::server
