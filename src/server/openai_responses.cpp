#include "server/openai_responses.h"

#include <cstdint>
#include <set>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/http_wire.h"
#include "server/json_fields.h"

namespace tessera::server {
namespace {

// Every top-level field of the Responses API that this server reads or accepts; anything else is a
// 400 naming it (ignoring it silently would leave the client believing it took effect).
const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {"model",
                                          "input",
                                          "instructions",
                                          "tools",
                                          "tool_choice",
                                          "max_output_tokens",
                                          "temperature",
                                          "top_p",
                                          "stream",
                                          "stream_options",
                                          "reasoning",
                                          "text",
                                          "parallel_tool_calls",
                                          "metadata",
                                          "user",
                                          "store",
                                          "previous_response_id",
                                          "include",
                                          "truncation",
                                          "background",
                                          "service_tier",
                                          "prompt_cache_key",
                                          "safety_identifier",
                                          "conversation",
                                          "tessera_script"};
  return k;
}

// An optional member of a nested object: null or absent is not given, anything but a string a 400.
std::optional<std::string> optional_string(const OJson& o, const char* key, const std::string& where) {
  const OJson* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(where + "." + key, "{}.{} must be a string", where, key);
  return v->get<std::string>();
}

const std::string& item_type(const OJson& part, const std::string& where) {
  return type_member(part, where, "an object with a 'type'");
}

// A message's content: a string, or input_text / output_text parts joined with newlines (as the
// chat path joins text parts). Images, files and audio are refused: the model reads text only.
std::string content_text(const OJson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(where, "{} must be a string or an array of content parts", where);
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = fmt::format("{}[{}]", where, k);
    const std::string& type = item_type(content[k], w);
    std::string text;
    if (type == "input_text" || type == "output_text" || type == "text")
      text = required_string(content[k], "text", w, false);
    else if (type == "refusal")
      text = required_string(content[k], "refusal", w, false);
    else if (type == "input_image" || type == "input_file" || type == "input_audio")
      bad_request(w + ".type", "{}.type: '{}' content is not supported: this server serves a text-only model", w, type);
    else
      bad_request(w + ".type", "{}.type: content part type '{}' is not supported here", w, excerpt(type, 40));
    if (k) out += "\n";
    out += text;
  }
  return out;
}

// The reasoning an earlier response's reasoning item carried (its reasoning_text parts); summaries
// and encrypted content are not the model's own words and are dropped.
std::string reasoning_text(const OJson& item, const std::string& where) {
  std::string out;
  const OJson* c = field(item, "content");
  if (!c) return out;
  if (!c->is_array()) bad_request(where + ".content", "{}.content must be an array", where);
  for (size_t k = 0; k < c->size(); ++k) {
    const std::string w = fmt::format("{}.content[{}]", where, k);
    if (item_type((*c)[k], w) == "reasoning_text") out += required_string((*c)[k], "text", w, false);
  }
  return out;
}

// input (a string, or an array of items) -> chat messages after `out`'s system message. Messages
// keep their role (developer becomes system in the chat parser); function_call items become the
// tool_calls of an assistant message (merged into the assistant message right before them, as the
// chat API has text and calls in one message), function_call_output items tool messages; a
// reasoning item's text goes to the next assistant message's reasoning_content.
void translate_input(const OJson& input, OJson& out) {
  if (input.is_string()) {
    out.push_back(OJson{{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) bad_request("input", "'input' must be a string or an array of input items");
  if (input.empty()) bad_request("input", "'input' must not be empty");
  std::set<std::string> call_ids;
  std::string reasoning;
  bool has_reasoning = false;
  // The assistant message function_call items join, while nothing else came in between.
  auto open_assistant = [&](bool for_call) -> OJson& {
    const bool join = for_call && !out.empty() && out.back()["role"] == "assistant" && !has_reasoning;
    if (!join) out.push_back(OJson{{"role", "assistant"}, {"content", nullptr}});
    OJson& m = out.back();
    if (has_reasoning) m["reasoning_content"] = reasoning;
    reasoning.clear();
    has_reasoning = false;
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = fmt::format("input[{}]", i);
    const OJson& it = input[i];
    if (!it.is_object()) bad_request(where, "{} must be an object", where);
    const OJson* t = field(it, "type");
    if (t && !t->is_string()) bad_request(where + ".type", "{}.type must be a string", where);
    const std::string type = t ? t->get<std::string>() : "message";
    if (type == "message") {
      const std::string& role = required_string(it, "role", where, true);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad_request(where + ".role", "{}.role must be user, assistant, system or developer, got '{}'", where,
                    excerpt(role, 40));
      const OJson* c = field(it, "content");
      if (!c) bad_request(where + ".content", "{}.content is required", where);
      std::string text = content_text(*c, where + ".content");
      if (role == "assistant") {
        open_assistant(false)["content"] = std::move(text);
      } else {
        out.push_back(OJson{{"role", role}, {"content", std::move(text)}});
      }
    } else if (type == "function_call") {
      const std::string& call_id = required_string(it, "call_id", where, true);
      const std::string& name = required_string(it, "name", where, true);
      const std::string& arguments = required_string(it, "arguments", where, false);
      call_ids.insert(call_id);
      OJson& m = open_assistant(true);
      if (!m.contains("tool_calls")) m["tool_calls"] = OJson::array();
      m["tool_calls"].push_back(
          OJson{{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
    } else if (type == "function_call_output") {
      const std::string& call_id = required_string(it, "call_id", where, true);
      if (!call_ids.count(call_id))
        bad_request(where + ".call_id", "{}.call_id '{}' names no function_call item earlier in 'input'", where,
                    excerpt(call_id, 80));
      const OJson* o = field(it, "output");
      if (!o) bad_request(where + ".output", "{}.output is required", where);
      out.push_back(
          OJson{{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*o, where + ".output")}});
    } else if (type == "reasoning") {
      reasoning += reasoning_text(it, where);
      has_reasoning = true;
    } else if (type == "item_reference") {
      bad_request(where + ".type", "{}.type: item references need stored responses; this server stores none", where);
    } else {
      bad_request(where + ".type",
                  "{}.type: input item type '{}' is not supported (message, function_call, function_call_output and "
                  "reasoning are)",
                  where, excerpt(type, 40));
    }
  }
}

// tools[i] {type: function, name, description, parameters, strict} -> the chat tool.
OJson translate_tools(const OJson& tools) {
  if (!tools.is_array()) bad_request("tools", "'tools' must be an array");
  OJson out = OJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const OJson& t = tools[i];
    if (!t.is_object()) bad_request(w, "{} must be an object", w);
    const std::string& type = required_string(t, "type", w, true);
    if (type != "function")
      bad_request(w + ".type",
                  "{}.type '{}' is not supported: this server has no built-in tools; define a function tool with "
                  "name, description and parameters",
                  w, excerpt(type, 60));
    OJson f{{"name", required_string(t, "name", w, true)}};
    if (auto d = optional_string(t, "description", w)) f["description"] = *d;
    if (const OJson* p = field(t, "parameters")) {
      if (!p->is_object()) bad_request(w + ".parameters", "{}.parameters must be a JSON Schema object", w);
      f["parameters"] = *p;
    }
    if (const OJson* s = field(t, "strict")) {
      if (!s->is_boolean()) bad_request(w + ".strict", "{}.strict must be a boolean", w);
      f["strict"] = *s;
    }
    out.push_back(OJson{{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

OJson translate_tool_choice(const OJson& tc) {
  if (tc.is_string()) {
    const std::string& s = tc.get_ref<const std::string&>();
    if (s != "auto" && s != "none" && s != "required")
      bad_request("tool_choice",
                  "'tool_choice' must be auto, none, required or {{\"type\": \"function\", \"name\": ...}}");
    return tc;
  }
  if (!tc.is_object()) bad_request("tool_choice", "'tool_choice' must be a string or an object with a 'type'");
  const std::string& type = required_string(tc, "type", "tool_choice", true);
  if (type != "function")
    bad_request("tool_choice.type", "tool_choice.type '{}' is not supported (only function tools are)",
                excerpt(type, 40));
  return OJson{{"type", "function"}, {"function", {{"name", required_string(tc, "name", "tool_choice", true)}}}};
}

// text.format -> the chat request's response_format (the chat parser decides what it supports).
void translate_text(const OJson& text, OJson& out) {
  if (!text.is_object()) bad_request("text", "'text' must be an object");
  if (auto v = optional_string(text, "verbosity", "text"); v && *v != "low" && *v != "medium" && *v != "high")
    bad_request("text.verbosity", "text.verbosity must be low, medium or high");
  const OJson* f = field(text, "format");
  if (!f) return;
  const std::string& type = item_type(*f, "text.format");
  if (type == "text") return;
  if (type == "json_object") {
    out["response_format"] = OJson{{"type", "json_object"}};
  } else if (type == "json_schema") {
    OJson js{{"name", required_string(*f, "name", "text.format", true)}};
    const OJson* schema = field(*f, "schema");
    if (!schema || !schema->is_object())
      bad_request("text.format.schema", "text.format.schema must be a JSON Schema object");
    js["schema"] = *schema;
    if (auto d = optional_string(*f, "description", "text.format")) js["description"] = *d;
    if (const OJson* s = field(*f, "strict")) {
      if (!s->is_boolean()) bad_request("text.format.strict", "text.format.strict must be a boolean");
      js["strict"] = *s;
    }
    out["response_format"] = OJson{{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else {
    bad_request("text.format.type", "text.format.type must be text, json_object or json_schema, got '{}'",
                excerpt(type, 40));
  }
}

void check_settings(const OJson& b) {
  for (const auto& [key, value] : b.items())
    if (!value.is_null() && !known_fields().count(key))
      bad_request(key, "'{}' is not a field of the Responses API this server knows", excerpt(key, 60));
  if (field(b, "previous_response_id"))
    bad_request("previous_response_id",
                "'previous_response_id' is not supported: this server stores no responses; send the whole "
                "conversation in 'input'");
  if (field(b, "conversation"))
    bad_request("conversation",
                "'conversation' is not supported: this server stores no conversations; send the whole conversation "
                "in 'input'");
  if (auto v = get_bool(b, "background"); v && *v)
    bad_request("background", "'background' responses are not supported: they need stored responses");
  (void)get_bool(b, "store");  // accepted, nothing is stored (echoed as false)
  (void)get_bool(b, "parallel_tool_calls");
  (void)get_str(b, "user");
  (void)get_str(b, "service_tier");
  (void)get_str(b, "prompt_cache_key");
  (void)get_str(b, "safety_identifier");
  if (const OJson* md = field(b, "metadata")) {
    if (!md->is_object()) bad_request("metadata", "'metadata' must be an object of strings");
    for (const auto& [k, v] : md->items())
      if (!v.is_string()) bad_request("metadata." + k, "metadata values must be strings ('{}')", excerpt(k, 60));
  }
  if (const OJson* inc = field(b, "include")) {
    if (!inc->is_array()) bad_request("include", "'include' must be an array of strings");
    for (const auto& x : *inc)
      if (!x.is_string()) bad_request("include", "'include' must be an array of strings");
  }
  if (auto t = get_str(b, "truncation"); t && *t != "disabled")
    bad_request("truncation",
                "'truncation' '{}' is not supported: a conversation is never shortened here ('disabled'); a prompt "
                "past the context is a 400",
                excerpt(*t, 40));
  if (const OJson* so = field(b, "stream_options"); so && !so->is_object())
    bad_request("stream_options", "'stream_options' must be an object");
}

// The chat parser's field names back to the Responses fields they came from.
std::string responses_param(const std::string& p) {
  if (p == "max_tokens") return "max_output_tokens";
  if (p == "reasoning_effort") return "reasoning.effort";
  if (p.rfind("response_format", 0) == 0) return "text.format";
  // An index into the translated messages is not the client's index into input.
  if (p.rfind("messages", 0) == 0) return "input";
  if (p.rfind("tools[", 0) == 0) {
    std::string out = p;
    if (auto at = out.find(".function"); at != std::string::npos) out.erase(at, 9);
    return out;
  }
  return p;
}

OJson usage_object(const Usage& u) {
  return OJson{{"input_tokens", u.prompt_tokens},
               {"input_tokens_details", OJson{{"cached_tokens", u.cached_tokens}}},
               {"output_tokens", u.completion_tokens},
               {"output_tokens_details", OJson{{"reasoning_tokens", u.reasoning_tokens}}},
               {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

OJson reasoning_part(const std::string& text) { return OJson{{"type", "reasoning_text"}, {"text", text}}; }
OJson text_part(const std::string& text) {
  return OJson{{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}};
}
OJson reasoning_item(const std::string& id, OJson content) {
  return OJson{{"type", "reasoning"}, {"id", id}, {"summary", OJson::array()}, {"content", std::move(content)}};
}
OJson message_item(const std::string& id, const std::string& status, OJson content) {
  return OJson{
      {"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}
OJson function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                         const std::string& arguments, const std::string& status) {
  return OJson{{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
               {"arguments", arguments},  {"status", status}};
}

}  // namespace

OJson responses_to_chat_request(const OJson& b) {
  if (!b.is_object()) bad_request("", "the request body must be a JSON object");
  check_settings(b);
  OJson out = OJson::object();
  if (const OJson* m = field(b, "model")) out["model"] = *m;
  if (const OJson* mt = field(b, "max_output_tokens")) out["max_tokens"] = *mt;
  // Same names and meaning on both APIs: validated by the chat parser.
  for (const char* k : {"temperature", "top_p", "stream", "tessera_script"})
    if (const OJson* v = field(b, k)) out[k] = *v;

  OJson messages = OJson::array();
  if (const OJson* ins = field(b, "instructions")) {
    if (!ins->is_string()) bad_request("instructions", "'instructions' must be a string");
    if (!ins->get_ref<const std::string&>().empty()) messages.push_back(OJson{{"role", "system"}, {"content", *ins}});
  }
  const OJson* input = field(b, "input");
  if (!input) bad_request("input", "'input' is required");
  translate_input(*input, messages);
  out["messages"] = std::move(messages);

  if (const OJson* t = field(b, "tools")) {
    OJson tools = translate_tools(*t);
    if (!tools.empty()) out["tools"] = std::move(tools);
  }
  if (const OJson* tc = field(b, "tool_choice")) out["tool_choice"] = translate_tool_choice(*tc);
  if (const OJson* r = field(b, "reasoning")) {
    if (!r->is_object()) bad_request("reasoning", "'reasoning' must be an object");
    if (auto e = optional_string(*r, "effort", "reasoning")) out["reasoning_effort"] = *e;
    (void)optional_string(*r, "summary", "reasoning");
    (void)optional_string(*r, "generate_summary", "reasoning");
  }
  if (const OJson* t = field(b, "text")) translate_text(*t, out);
  return out;
}

OJson responses_echo(const OJson& b, const GenerationJob& job) {
  auto given = [&](const char* k, OJson dflt) {
    const OJson* v = field(b, k);
    return v ? *v : dflt;
  };
  OJson reasoning{{"effort", nullptr}, {"summary", nullptr}};
  if (const OJson* r = field(b, "reasoning"))
    for (const char* k : {"effort", "summary"})
      if (const OJson* v = field(*r, k)) reasoning[k] = *v;
  OJson text{{"format", OJson{{"type", "text"}}}};
  if (const OJson* t = field(b, "text")) {
    if (const OJson* f = field(*t, "format")) text["format"] = *f;
    if (const OJson* v = field(*t, "verbosity")) text["verbosity"] = *v;
  }
  return OJson{{"instructions", given("instructions", nullptr)},
               {"max_output_tokens", given("max_output_tokens", nullptr)},
               {"parallel_tool_calls", given("parallel_tool_calls", true)},
               {"previous_response_id", nullptr},
               {"reasoning", std::move(reasoning)},
               {"store", false},
               {"temperature", given("temperature", static_cast<double>(job.params.temperature))},
               {"text", std::move(text)},
               {"tool_choice", given("tool_choice", "auto")},
               {"tools", given("tools", OJson::array())},
               {"top_p", given("top_p", static_cast<double>(job.params.top_p))},
               {"truncation", given("truncation", "disabled")},
               {"user", given("user", nullptr)},
               {"metadata", given("metadata", OJson::object())}};
}

GenerationJob parse_responses_request(const OJson& body, const ServedModel& model, const ParseLimits& limits,
                                      OJson& echo) {
  const OJson chat = responses_to_chat_request(body);
  GenerationJob job;
  try {
    job = parse_chat_request(chat, model, limits);
  } catch (const ApiError& e) {
    const std::string p = responses_param(e.param());
    std::string msg = e.what();
    if (p != e.param() && msg.find(p) == std::string::npos) msg = p + ": " + msg;
    throw ApiError(e.status(), msg, p, e.code());
  }
  echo = responses_echo(body, job);
  return job;
}

std::string output_item_id(const ResponseMeta& m, const char* prefix, size_t index) {
  const size_t us = m.id.find('_');
  return fmt::format("{}_{}_{}", prefix, us == std::string::npos ? m.id : m.id.substr(us + 1), index);
}

OJson response_object(const ResponseMeta& m, const OJson& echo, const std::string& status, OJson output,
                      const Usage* usage) {
  OJson r{{"id", m.id},
          {"object", "response"},
          {"created_at", m.created},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", status == "incomplete" ? OJson{{"reason", "max_output_tokens"}} : OJson()},
          {"model", m.model},
          {"output", std::move(output)},
          {"usage", usage ? usage_object(*usage) : OJson()}};
  for (const auto& [k, v] : echo.items()) r[k] = v;
  return r;
}

OJson responses_response(const ResponseMeta& m, const OJson& echo, const ChoiceAccum& a, const Usage& u) {
  const std::string status = a.finish_reason == "length" ? "incomplete" : "completed";
  OJson output = OJson::array();
  if (!a.reasoning.empty())
    output.push_back(
        reasoning_item(output_item_id(m, "rs", output.size()), OJson::array({reasoning_part(a.reasoning)})));
  if (!a.content.empty()) {
    // The item the output limit cut: the last one (calls cut short are left out).
    const bool cut = status == "incomplete" && a.tool_calls.empty();
    output.push_back(message_item(output_item_id(m, "msg", output.size()), cut ? "incomplete" : "completed",
                                  OJson::array({text_part(a.content)})));
  }
  for (const auto& entry : a.tool_calls) {
    const text::ToolCall& tc = entry.second;
    output.push_back(
        function_call_item(output_item_id(m, "fc", output.size()), tc.id, tc.name, tc.arguments, "completed"));
  }
  return response_object(m, echo, status, std::move(output), &u);
}

std::string ResponsesStream::event(OJson j) {
  OJson e{{"type", j["type"]}, {"sequence_number", sequence_++}};
  for (const auto& [k, v] : j.items())
    if (k != "type") e[k] = v;
  return anthropic_sse(e);
}

std::string ResponsesStream::start() {
  // Two statements: the operands of + are evaluated in no fixed order, the sequence numbers must be.
  std::string out = event(OJson{{"type", "response.created"},
                                {"response", response_object(meta_, echo_, "in_progress", OJson::array(), nullptr)}});
  return out + event(OJson{{"type", "response.in_progress"},
                           {"response", response_object(meta_, echo_, "in_progress", OJson::array(), nullptr)}});
}

std::string ResponsesStream::open(Item kind, OJson item) {
  std::string out = close("completed");
  item_ = kind;
  current_ = std::move(item);
  // Numbered after the previous item is closed (its place in output_).
  const char* prefix = kind == Item::kReasoning ? "rs" : kind == Item::kMessage ? "msg" : "fc";
  current_["id"] = output_item_id(meta_, prefix, output_.size());
  text_.clear();
  const auto index = static_cast<int64_t>(output_.size());
  out += event(OJson{{"type", "response.output_item.added"}, {"output_index", index}, {"item", current_}});
  if (kind == Item::kReasoning || kind == Item::kMessage)
    out += event(OJson{{"type", "response.content_part.added"},
                       {"item_id", current_["id"]},
                       {"output_index", index},
                       {"content_index", 0},
                       {"part", kind == Item::kReasoning ? reasoning_part("") : text_part("")}});
  return out;
}

std::string ResponsesStream::close(const char* status) {
  if (item_ == Item::kNone) return "";
  const auto index = static_cast<int64_t>(output_.size());
  const OJson id = current_["id"];
  std::string out;
  auto part_done = [&](const char* done_type, OJson part) {
    out += event(
        OJson{{"type", done_type}, {"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
    out += event(OJson{{"type", "response.content_part.done"},
                       {"item_id", id},
                       {"output_index", index},
                       {"content_index", 0},
                       {"part", part}});
    current_["content"] = OJson::array({std::move(part)});
  };
  if (item_ == Item::kReasoning) {
    part_done("response.reasoning_text.done", reasoning_part(text_));
  } else if (item_ == Item::kMessage) {
    part_done("response.output_text.done", text_part(text_));
    current_["status"] = status;
  } else {
    out += event(OJson{{"type", "response.function_call_arguments.done"},
                       {"item_id", id},
                       {"output_index", index},
                       {"name", current_["name"]},
                       {"arguments", text_}});
    current_["arguments"] = text_;
    current_["status"] = status;
  }
  out += event(OJson{{"type", "response.output_item.done"}, {"output_index", index}, {"item", current_}});
  output_.push_back(std::move(current_));
  current_ = OJson();
  item_ = Item::kNone;
  return out;
}

std::string ResponsesStream::add(const ChoiceEvent& ev) {
  std::string out;
  auto delta = [&](const char* type, const std::string& d, bool content_index) {
    text_ += d;
    OJson e{{"type", type}, {"item_id", current_["id"]}, {"output_index", static_cast<int64_t>(output_.size())}};
    if (content_index) e["content_index"] = 0;
    e["delta"] = d;
    out += event(std::move(e));
  };
  const text::OutputDelta& d = ev.delta;
  if (!d.reasoning.empty()) {
    if (item_ != Item::kReasoning) out += open(Item::kReasoning, reasoning_item("", OJson::array()));
    delta("response.reasoning_text.delta", d.reasoning, true);
  }
  if (!d.content.empty()) {
    if (item_ != Item::kMessage) out += open(Item::kMessage, message_item("", "in_progress", OJson::array()));
    delta("response.output_text.delta", d.content, true);
  }
  for (const auto& t : d.tool_calls) {
    if (item_ != Item::kFunctionCall || t.index != tool_call_ || t.id || t.name) {
      out +=
          open(Item::kFunctionCall, function_call_item("", t.id.value_or(""), t.name.value_or(""), "", "in_progress"));
      tool_call_ = t.index;
    }
    if (!t.arguments.empty()) delta("response.function_call_arguments.delta", t.arguments, false);
  }
  if (ev.finish_reason) finish_reason_ = ev.finish_reason;
  if (ev.complete_tool_calls) complete_tool_calls_ = ev.complete_tool_calls;
  return out;
}

std::string ResponsesStream::finish(const Usage& u) {
  const bool cut = finish_reason_ == "length";
  const std::string status = cut ? "incomplete" : "completed";
  // The open item is the one the output limit cut; a tool call only when it was left incomplete.
  bool item_cut = cut;
  if (item_ == Item::kFunctionCall) item_cut = complete_tool_calls_ && tool_call_ >= *complete_tool_calls_;
  std::string out = close(item_cut ? "incomplete" : "completed");
  return out +
         event(OJson{{"type", "response." + status}, {"response", response_object(meta_, echo_, status, output_, &u)}});
}

std::string ResponsesStream::error(int status, const std::string& message) {
  return event(OJson{{"type", "error"}, {"code", error_code(status)}, {"message", message}, {"param", nullptr}});
}

}  // namespace tessera::server
