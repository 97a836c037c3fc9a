#include "server/request_parse.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "server/api_error.h"

namespace tessera::server {
namespace {

using OJson = nlohmann::ordered_json;

// Optional fields: absent and null both mean "not given"; a present value of the wrong type is a 400.
const OJson* field(const OJson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const OJson& b, const char* key) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(key, "'{}' must be a boolean", key);
  return v->get<bool>();
}

std::optional<int64_t> get_int(const OJson& b, const char* key, int64_t lo, int64_t hi) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, u);
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && v->get<double>() == static_cast<double>(static_cast<int64_t>(v->get<double>())) &&
             std::abs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());  // 16.0 is an integer to JavaScript clients
  } else {
    bad_request(key, "'{}' must be an integer", key);
  }
  if (x < lo || x > hi) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

std::optional<double> get_num(const OJson& b, const char* key, double lo, double hi) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(key, "'{}' must be a number", key);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

std::optional<std::string> get_str(const OJson& b, const char* key) {
  const OJson* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(key, "'{}' must be a string", key);
  return v->get<std::string>();
}

void check_model(const OJson& b, const ServedModel& m, GenerationJob& job) {
  if (auto name = get_str(b, "model")) {
    if (*name != m.id) throw ApiError(404, fmt::format("The model '{}' does not exist; this server serves '{}'", *name, m.id), "model");
  }
  job.model = m.id;
}

// Sampling fields shared by both endpoints.
void parse_sampling(const OJson& b, const ServedModel& m, const ParseLimits& lim, GenerationJob& job) {
  auto& p = job.params;
  if (auto v = get_num(b, "temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = get_num(b, "top_p", 0.0, 1.0)) {
    if (*v <= 0.0) bad_request("top_p", "'top_p' must be in (0, 1], got {}", *v);
    p.top_p = static_cast<float>(*v);
  }
  if (auto v = get_int(b, "top_k", -1, 1 << 30)) p.top_k = *v;
  if (auto v = get_num(b, "min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
  if (auto v = get_num(b, "presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = get_num(b, "frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = get_num(b, "repetition_penalty", 0.0, 100.0)) {
    if (*v <= 0.0) bad_request("repetition_penalty", "'repetition_penalty' must be > 0");
    p.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = get_int(b, "n", 1, lim.max_n)) p.n = *v;
  if (auto v = get_int(b, "best_of", 1, lim.max_n))
    if (*v != p.n) bad_request("best_of", "'best_of' other than n is not supported");
  if (auto v = get_int(b, "seed", INT64_MIN, INT64_MAX)) p.seed = static_cast<uint64_t>(*v);
  if (auto v = get_bool(b, "ignore_eos")) p.ignore_eos = *v;
  if (const OJson* s = field(b, "stop")) {
    if (s->is_string()) {
      job.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (static_cast<int64_t>(s->size()) > lim.max_stop_strings)
        bad_request("stop", "at most {} stop strings are allowed, got {}", lim.max_stop_strings, s->size());
      for (const auto& x : *s) {
        if (!x.is_string()) bad_request("stop", "'stop' must be a string or an array of strings");
        job.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_request("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : job.stop)
      if (static_cast<int64_t>(x.size()) > lim.max_stop_string_bytes)
        bad_request("stop", "stop strings may be at most {} bytes", lim.max_stop_string_bytes);
  }
  if (const OJson* s = field(b, "stop_token_ids")) {
    if (!s->is_array() || static_cast<int64_t>(s->size()) > 64) bad_request("stop_token_ids", "'stop_token_ids' must be an array of at most 64 token ids");
    for (const auto& x : *s) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.vocab_size)
        bad_request("stop_token_ids", "'stop_token_ids' entries must be token ids in [0, {})", m.vocab_size);
      p.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  if (auto v = get_bool(b, "include_stop_str_in_output")) job.include_stop_str = *v;
  if (auto v = get_bool(b, "skip_special_tokens")) job.skip_special_tokens = *v;
  if (const OJson* lb = field(b, "logit_bias")) {
    if (!lb->is_object()) bad_request("logit_bias", "'logit_bias' must be an object");
    if (!lb->empty()) bad_request("logit_bias", "'logit_bias' is not supported by this server");
  }
  if (auto v = get_bool(b, "stream")) job.stream = *v;
  if (const OJson* so = field(b, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    if (!job.stream) bad_request("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (auto v = get_bool(*so, "include_usage")) job.include_usage = *v;
  }
  p.eos_token_ids = m.eos_ids;
  if (const OJson* script = field(b, "tessera_script")) {
    if (!lim.allow_test_script) bad_request("tessera_script", "'tessera_script' needs a server started with --enable-test-script");
    if (script->is_string()) {
      p.scripted_tokens = m.tokenizer->encode(script->get<std::string>());
    } else if (script->is_array()) {
      for (const auto& x : *script) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.vocab_size)
          bad_request("tessera_script", "'tessera_script' ids must be in [0, {})", m.vocab_size);
        p.scripted_tokens.push_back(x.get<int32_t>());
      }
    } else {
      bad_request("tessera_script", "'tessera_script' must be a string or an array of token ids");
    }
  }
}

// max_tokens: given, or what the context leaves; prompt + max_tokens must fit the context.
void resolve_max_tokens(const OJson& b, const ServedModel& m, GenerationJob& job, int64_t default_max) {
  int64_t longest = 0;
  for (const auto& pr : job.prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(pr.size()));
  if (longest >= m.max_model_len)
    bad_request(job.endpoint == Endpoint::kChat ? "messages" : "prompt", "the prompt is {} tokens; this model's context is {} tokens (prompt + output)", longest, m.max_model_len);
  const char* key = field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  std::optional<int64_t> mt = get_int(b, key, 1, INT64_MAX / 4);
  const int64_t room = m.max_model_len - longest;
  job.params.max_tokens = mt ? *mt : (default_max > 0 ? std::min(default_max, room) : room);
  if (job.params.max_tokens > room)
    bad_request(key, "prompt ({} tokens) + max_tokens ({}) exceeds this model's context of {} tokens", longest,
                job.params.max_tokens, m.max_model_len);
  if (auto v = get_int(b, "min_tokens", 0, job.params.max_tokens)) job.params.min_tokens = *v;
}

std::string join_text_parts(const OJson& content, const std::string& where) {
  std::string out;
  bool first = true;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(where, "{}: each content part must be an object with a 'type'", where);
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad_request(where, "{}: content part type '{}' is not supported (text only)", where, type);
    if (!part.contains("text") || !part["text"].is_string()) bad_request(where, "{}: a text part needs a string 'text'", where);
    if (!first) out += "\n";
    out += part["text"].get<std::string>();
    first = false;
  }
  return out;
}

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
    if (!kRoles.count(role)) bad_request(where + ".role", "{}.role '{}' is not one of system, developer, user, assistant, tool", where, role);
    OJson n = m;
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
        if (!f.contains("name") || !f["name"].is_string()) bad_request(w + ".function.name", "{}.function.name must be a string", w);
        if (!f.contains("arguments") || f["arguments"].is_null()) f["arguments"] = "{}";
        else if (f["arguments"].is_object()) f["arguments"] = f["arguments"].dump();
        else if (!f["arguments"].is_string()) bad_request(w + ".function.arguments", "{}.function.arguments must be a JSON string", w);
        if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null()) bad_request(w + ".id", "{}.id must be a string", w);
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
    if (!x.contains("function") || !x["function"].is_object()) bad_request(w + ".function", "{}.function must be an object", w);
    const OJson& f = x["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      bad_request(w + ".function.name", "{}.function.name must be a non-empty string", w);
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      bad_request(w + ".function.parameters", "{}.function.parameters must be a JSON Schema object", w);
    names.insert(f["name"].get<std::string>());
  }
  return t->empty() ? OJson() : *t;
}

std::string truncate_message(std::string s) {
  if (s.size() > 2000) s = s.substr(0, 2000) + "...";
  return s;
}

}  // namespace

std::optional<int64_t> reasoning_effort_budget(const std::string& effort) {
  if (effort == "none") return 0;
  if (effort == "minimal") return 256;
  if (effort == "low") return 1024;
  if (effort == "medium") return 4096;
  if (effort == "high") return 16384;
  if (effort == "xhigh" || effort == "max") return std::nullopt;
  bad_request("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; got '{}'",
              effort);
}

GenerationJob parse_chat_request(const OJson& b, const ServedModel& m, const ParseLimits& lim) {
  if (!b.is_object()) bad_request("", "the request body must be a JSON object");
  GenerationJob job;
  job.endpoint = Endpoint::kChat;
  check_model(b, m, job);
  if (!b.contains("messages")) bad_request("messages", "'messages' is required");
  text::ChatRenderInput ri;
  ri.messages = normalize_messages(b["messages"]);
  std::set<std::string> tool_names;
  ri.tools = validate_tools(b, tool_names);
  ri.bos_token = m.bos_token;
  ri.eos_token = m.eos_token;
  if (auto v = get_bool(b, "add_generation_prompt")) ri.add_generation_prompt = *v;
  if (auto v = get_bool(b, "continue_final_message"); v && *v)
    bad_request("continue_final_message", "'continue_final_message' is not supported");

  std::string tool_choice = ri.tools.is_null() ? "none" : "auto";
  if (const OJson* tc = field(b, "tool_choice")) {
    if (tc->is_string()) {
      tool_choice = tc->get<std::string>();
      if (tool_choice != "none" && tool_choice != "auto" && tool_choice != "required")
        bad_request("tool_choice", "'tool_choice' must be none, auto, required or a named function");
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      const std::string name = (*tc)["function"]["name"].get<std::string>();
      if (!tool_names.count(name)) bad_request("tool_choice", "'tool_choice' names '{}', which is not in 'tools'", name);
      tool_choice = "named";
      job.named_tool_choice = true;
    } else {
      bad_request("tool_choice", "'tool_choice' must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
    }
    if (tool_choice != "none" && ri.tools.is_null()) bad_request("tool_choice", "'tool_choice' needs 'tools'");
  }
  job.tool_names.assign(tool_names.begin(), tool_names.end());
  job.parse_tools = !ri.tools.is_null() && tool_choice != "none" && m.tools.format != text::ToolCallFormat::kNone;

  // The thinking switch: chat_template_kwargs.thinking / enable_thinking (either name; both are
  // passed to the template), Moonshot's {"thinking": {"type": "disabled"}}, reasoning_effort none.
  std::optional<bool> thinking;
  if (const OJson* kw = field(b, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    ri.kwargs = *kw;
    for (const char* k : {"thinking", "enable_thinking"}) {
      if (const OJson* t = field(*kw, k)) {
        if (!t->is_boolean()) bad_request(std::string("chat_template_kwargs.") + k, "chat_template_kwargs.{} must be a boolean", k);
        thinking = t->get<bool>();
      }
    }
  }
  if (const OJson* t = field(b, "thinking"); t && !thinking) {
    if (t->is_boolean()) thinking = t->get<bool>();
    else if (t->is_object() && t->contains("type") && (*t)["type"].is_string())
      thinking = (*t)["type"].get<std::string>() != "disabled";
    else bad_request("thinking", "'thinking' must be a boolean or {{\"type\": \"enabled\"|\"disabled\"}}");
  }
  std::optional<int64_t> budget = get_int(b, "thinking_token_budget", 0, INT64_MAX / 4);
  if (auto eff = get_str(b, "reasoning_effort")) {
    auto eb = reasoning_effort_budget(*eff);
    if (*eff == "none" && !thinking) thinking = false;
    if (!budget) budget = eb;
  }
  job.thinking = thinking.value_or(m.default_thinking);
  ri.kwargs["thinking"] = job.thinking;
  ri.kwargs["enable_thinking"] = job.thinking;
  if (auto v = get_bool(b, "include_reasoning")) job.include_reasoning = *v;

  std::string prompt;
  try {
    prompt = (ri.tools.is_null() ? *m.chat_template : *m.chat_template_tools).render(ri);
  } catch (const std::exception& e) {
    bad_request("messages", "the chat template failed for this conversation: {}", truncate_message(e.what()));
  }
  job.prompts.push_back(m.tokenizer->encode(prompt));
  parse_sampling(b, m, lim, job);
  resolve_max_tokens(b, m, job, 0);
  if (auto v = get_bool(b, "logprobs")) job.logprobs = *v;
  if (auto v = get_int(b, "top_logprobs", 0, 20)) {
    if (!job.logprobs) bad_request("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    job.top_logprobs = *v;
  }
  if (job.logprobs) job.params.logprobs = job.top_logprobs;
  if (const OJson* rf = field(b, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad_request("response_format", "'response_format' must be an object with a 'type'");
    if ((*rf)["type"].get<std::string>() != "text")
      bad_request("response_format", "response_format '{}' is not supported by this server (no constrained decoding)",
                  (*rf)["type"].get<std::string>());
  }

  job.reasoning_start = text::initial_reasoning_state(job.prompts[0], m.reasoning, job.thinking);
  if (m.reasoning.valid()) {
    // Thinking off: a region with budget 0 closes any <think> the model opens at once. Thinking
    // on with a budget: the engine closes the reasoning after `budget` tokens, capped to 3/4 of
    // max_tokens so the answer always keeps room.
    std::optional<int64_t> eff;
    if (!job.thinking) eff = 0;
    else if (budget) eff = std::min(*budget, job.params.max_tokens * 3 / 4);
    if (eff) {
      engine::BudgetedRegion r;
      r.start_id = m.reasoning.think_start;
      r.end_ids = {m.reasoning.think_end};
      r.budget = *eff;
      job.params.budgeted_region = r;
    }
  }
  return job;
}

GenerationJob parse_completion_request(const OJson& b, const ServedModel& m, const ParseLimits& lim) {
  if (!b.is_object()) bad_request("", "the request body must be a JSON object");
  GenerationJob job;
  job.endpoint = Endpoint::kCompletion;
  check_model(b, m, job);
  const OJson* pr = field(b, "prompt");
  if (!pr) bad_request("prompt", "'prompt' is required");
  bool add_special = true;
  if (auto v = get_bool(b, "add_special_tokens")) add_special = *v;
  text::EncodeOptions eo;
  eo.add_special_tokens = add_special;
  auto ids_of = [&](const OJson& arr) {
    std::vector<int32_t> ids;
    for (const auto& x : arr) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.vocab_size)
        bad_request("prompt", "token-id prompts must hold integers in [0, {})", m.vocab_size);
      ids.push_back(x.get<int32_t>());
    }
    return ids;
  };
  if (pr->is_string()) {
    job.prompts.push_back(m.tokenizer->encode(pr->get<std::string>(), eo));
  } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_string()) {
    for (const auto& x : *pr) {
      if (!x.is_string()) bad_request("prompt", "'prompt' must be a string, an array of strings, or token ids");
      job.prompts.push_back(m.tokenizer->encode(x.get<std::string>(), eo));
    }
  } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_array()) {
    for (const auto& x : *pr) {
      if (!x.is_array()) bad_request("prompt", "'prompt' must be a string, an array of strings, or token ids");
      job.prompts.push_back(ids_of(x));
    }
  } else if (pr->is_array() && !pr->empty()) {
    job.prompts.push_back(ids_of(*pr));
  } else {
    bad_request("prompt", "'prompt' must be a non-empty string, array of strings, or token ids");
  }
  if (job.prompts.size() > 64) bad_request("prompt", "at most 64 prompts per request");
  for (const auto& p : job.prompts)
    if (p.empty()) bad_request("prompt", "a prompt encodes to no tokens");
  if (auto e = get_bool(b, "echo"); e && *e) bad_request("echo", "'echo' is not supported");
  if (auto s = get_str(b, "suffix"); s && !s->empty()) bad_request("suffix", "'suffix' is not supported");
  parse_sampling(b, m, lim, job);
  resolve_max_tokens(b, m, job, 16);
  if (auto v = get_int(b, "logprobs", 0, 5)) {
    job.logprobs = true;
    job.top_logprobs = *v;
    job.params.logprobs = *v;
  }
  if (static_cast<int64_t>(job.prompts.size()) * job.params.n > 64) bad_request("n", "prompts x n must be at most 64");
  return job;
}

}  // namespace tessera::server
