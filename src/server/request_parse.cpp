#include "server/request_parse.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_messages.h"
#include "server/json_fields.h"

namespace tessera::server {
namespace {

void check_model(const OJson& b, const ServedModel& m, GenerationJob& job) {
  if (auto name = get_str(b, "model")) {
    if (*name != m.id)
      throw ApiError(404, fmt::format("The model '{}' does not exist; this server serves '{}'", *name, m.id), "model");
  }
  job.model = m.id;
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}, at most kMaxLogitBias entries.
constexpr size_t kMaxLogitBias = 1024;
void parse_logit_bias(const OJson& lb, int64_t vocab, engine::SamplingParams& p) {
  if (!lb.is_object()) bad_request("logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (lb.size() > kMaxLogitBias)
    bad_request("logit_bias", "'logit_bias' may hold at most {} tokens, got {}", kMaxLogitBias, lb.size());
  for (const auto& [key, value] : lb.items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id < 0 || id >= vocab)
      bad_request("logit_bias", "'logit_bias' keys must be token ids in [0, {}), got \"{}\"", vocab, key);
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
        value.get<double>() > 100.0)
      bad_request("logit_bias", "'logit_bias' values must be numbers in [-100, 100] (token {})", id);
    p.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
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
    if (!s->is_array() || static_cast<int64_t>(s->size()) > 64)
      bad_request("stop_token_ids", "'stop_token_ids' must be an array of at most 64 token ids");
    for (const auto& x : *s) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.vocab_size)
        bad_request("stop_token_ids", "'stop_token_ids' entries must be token ids in [0, {})", m.vocab_size);
      p.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  if (auto v = get_bool(b, "include_stop_str_in_output")) job.include_stop_str = *v;
  if (auto v = get_bool(b, "skip_special_tokens")) job.skip_special_tokens = *v;
  if (const OJson* lb = field(b, "logit_bias")) parse_logit_bias(*lb, m.vocab_size, p);
  if (auto v = get_bool(b, "stream")) job.stream = *v;
  if (const OJson* so = field(b, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    if (!job.stream) bad_request("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (auto v = get_bool(*so, "include_usage")) job.include_usage = *v;
  }
  p.eos_token_ids = m.eos_ids;
  if (const OJson* script = field(b, "tessera_script")) {
#if !TESSERA_TEST_HOOKS
    (void)script;
    bad_request("tessera_script", "'tessera_script' is a test hook this build of tessera does not have");
#else
    if (!lim.allow_test_script)
      bad_request("tessera_script", "'tessera_script' needs a server started with --enable-test-script");
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
#endif
  }
}

// max_tokens: given, or what the context leaves; prompt + max_tokens must fit the context.
void resolve_max_tokens(const OJson& b, const ServedModel& m, GenerationJob& job, int64_t default_max) {
  int64_t longest = 0;
  for (const auto& pr : job.prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(pr.size()));
  if (longest >= m.max_model_len)
    throw ApiError(400,
                   fmt::format("the prompt is {} tokens; this model's context is {} tokens (prompt + output)", longest,
                               m.max_model_len),
                   job.endpoint == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded");
  const char* key = field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  std::optional<int64_t> mt = get_int(b, key, 1, INT64_MAX / 4);
  const int64_t room = m.max_model_len - longest;
  job.params.max_tokens = mt ? *mt : (default_max > 0 ? std::min(default_max, room) : room);
  if (job.params.max_tokens > room)
    throw ApiError(400,
                   fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds this model's context of {} tokens",
                               longest, job.params.max_tokens, m.max_model_len),
                   key, "context_length_exceeded");
  if (auto v = get_int(b, "min_tokens", 0, job.params.max_tokens)) job.params.min_tokens = *v;
}

// A non-streamed response is built whole in memory, and with log-probabilities each generated token
// carries 1 + top_logprobs entries (token, logprob, bytes): a 136-byte request (n 16, 4000 tokens,
// top_logprobs 20) built a 115 MB answer and peaked 1.1 GB above idle. Bound the product up front.
void check_response_size(const OJson& b, const ParseLimits& lim, GenerationJob& job) {
  if (job.stream || !job.logprobs) return;
  const int64_t choices = static_cast<int64_t>(job.prompts.size()) * job.params.n;
  const int64_t per_token = 1 + job.top_logprobs;
  const double entries =
      static_cast<double>(choices) * static_cast<double>(job.params.max_tokens) * static_cast<double>(per_token);
  if (entries <= static_cast<double>(lim.max_logprob_entries)) return;
  const char* key = field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  bad_request(key,
              "a non-streamed response with logprobs holds up to {} choices x {} = {} tokens x (1 + top logprobs {}) = "
              "{:.0f} log-probability entries, more than this server's limit of {}: lower n, {} or the top logprobs, "
              "or stream the response",
              choices, key, job.params.max_tokens, job.top_logprobs, entries, lim.max_logprob_entries, key);
}

// response_format: text (nothing to do), json_object, or json_schema {name, schema, strict}.
void parse_response_format(const OJson& b, OutputConstraintSpec& spec) {
  const OJson* rf = field(b, "response_format");
  if (!rf) return;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    bad_request("response_format", "'response_format' must be an object with a 'type'");
  const std::string type = (*rf)["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    spec.answer = OutputConstraintSpec::Answer::kJsonObject;
    return;
  }
  if (type != "json_schema")
    bad_request("response_format.type", "response_format.type must be text, json_object or json_schema, got '{}'",
                type);
  const OJson* js = field(*rf, "json_schema");
  if (!js || !js->is_object())
    bad_request("response_format.json_schema", "response_format json_schema needs a 'json_schema' object");
  const OJson* schema = field(*js, "schema");
  if (!schema) {  // OpenAI allows it to be absent: any JSON object
    spec.answer = OutputConstraintSpec::Answer::kJsonObject;
    return;
  }
  if (!schema->is_object() && !schema->is_boolean())
    bad_request("response_format.json_schema.schema",
                "response_format.json_schema.schema must be a JSON Schema object");
  spec.answer = OutputConstraintSpec::Answer::kJsonSchema;
  spec.schema = *schema;
  spec.schema_path = "response_format.json_schema.schema";
}

// The constraint of a request (nullptr when none), on the job's sampling parameters.
void attach_constraint(const ServedModel& m, const OutputConstraintSpec& spec, GenerationJob& job) {
  if (!spec.constrains()) return;
  std::vector<int32_t> stops = m.eos_ids;
  stops.insert(stops.end(), job.params.stop_token_ids.begin(), job.params.stop_token_ids.end());
  job.params.constraint = m.constraints->make(spec, job.reasoning_start, std::move(stops));
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
  bad_request("reasoning_effort",
              "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; got '{}'", effort);
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

  OutputConstraintSpec spec;
  std::string tool_choice = ri.tools.is_null() ? "none" : "auto";
  if (const OJson* tc = field(b, "tool_choice")) {
    if (tc->is_string()) {
      tool_choice = tc->get<std::string>();
      if (tool_choice != "none" && tool_choice != "auto" && tool_choice != "required")
        bad_request("tool_choice", "'tool_choice' must be none, auto, required or a named function");
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      const std::string name = (*tc)["function"]["name"].get<std::string>();
      if (!tool_names.count(name))
        bad_request("tool_choice", "'tool_choice' names '{}', which is not in 'tools'", name);
      tool_choice = "named";
      job.named_tool_choice = true;
      spec.named_tool = name;
    } else {
      bad_request(
          "tool_choice",
          "'tool_choice' must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
    }
    if (tool_choice != "none" && ri.tools.is_null()) bad_request("tool_choice", "'tool_choice' needs 'tools'");
  }
  job.tool_names.assign(tool_names.begin(), tool_names.end());
  if (!ri.tools.is_null() && tool_choice != "none") {
    spec.tool_list = ri.tools;
    spec.tools = tool_choice == "auto"       ? OutputConstraintSpec::Tools::kAuto
                 : tool_choice == "required" ? OutputConstraintSpec::Tools::kRequired
                                             : OutputConstraintSpec::Tools::kNamed;
  }
  job.parse_tools = !ri.tools.is_null() && tool_choice != "none" && m.tools.format != text::ToolCallFormat::kNone;

  // The thinking switch: chat_template_kwargs.thinking / enable_thinking (either name; both are
  // passed to the template), Moonshot's {"thinking": {"type": "disabled"}}, reasoning_effort none.
  std::optional<bool> thinking;
  if (const OJson* kw = field(b, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    ri.kwargs = *kw;
    // The conversation itself is not a template kwarg: a client cannot swap it in behind validation.
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      ri.kwargs.erase(reserved);
    for (const char* k : {"thinking", "enable_thinking"}) {
      if (const OJson* t = field(*kw, k)) {
        if (!t->is_boolean())
          bad_request(std::string("chat_template_kwargs.") + k, "chat_template_kwargs.{} must be a boolean", k);
        thinking = t->get<bool>();
      }
    }
  }
  if (const OJson* t = field(b, "thinking"); t && !thinking) {
    if (t->is_boolean())
      thinking = t->get<bool>();
    else if (t->is_object() && t->contains("type") && (*t)["type"].is_string())
      thinking = (*t)["type"].get<std::string>() != "disabled";
    else
      bad_request("thinking", "'thinking' must be a boolean or {{\"type\": \"enabled\"|\"disabled\"}}");
  }
  std::optional<int64_t> budget = get_int(b, "thinking_token_budget", 0, INT64_MAX / 4);
  if (auto eff = get_str(b, "reasoning_effort")) {
    auto eb = reasoning_effort_budget(*eff);
    // An effort other than none asks for reasoning: it turns thinking on unless the request
    // switched it off explicitly.
    if (!thinking) thinking = *eff != "none";
    if (!budget) budget = eb;
  }
  job.thinking = thinking.value_or(m.default_thinking);
  ri.kwargs["thinking"] = job.thinking;
  ri.kwargs["enable_thinking"] = job.thinking;
  if (auto v = get_bool(b, "include_reasoning")) job.include_reasoning = *v;

  std::string prompt;
  try {
    rewrite_for_template(m.tool_rendering, ri);
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
  parse_response_format(b, spec);

  job.reasoning_start = text::initial_reasoning_state(job.prompts[0], m.reasoning, job.thinking);
  attach_constraint(m, spec, job);
  if (m.reasoning.valid()) {
    // Thinking off: a region with budget 0 closes any <think> the model opens at once. Thinking
    // on with a budget: the engine closes the reasoning after `budget` tokens, capped to 3/4 of
    // max_tokens so the answer always keeps room.
    std::optional<int64_t> eff;
    if (!job.thinking)
      eff = 0;
    else if (budget)
      eff = std::min(*budget, job.params.max_tokens * 3 / 4);
    if (eff) {
      engine::BudgetedRegion r;
      r.start_id = m.reasoning.think_start;
      r.end_ids = {m.reasoning.think_end};
      r.budget = *eff;
      job.params.budgeted_region = r;
    }
  }
  check_response_size(b, lim, job);
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
    job.echo_texts.push_back(pr->get<std::string>());
  } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_string()) {
    for (const auto& x : *pr) {
      if (!x.is_string()) bad_request("prompt", "'prompt' must be a string, an array of strings, or token ids");
      job.prompts.push_back(m.tokenizer->encode(x.get<std::string>(), eo));
      job.echo_texts.push_back(x.get<std::string>());
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
  if (auto e = get_bool(b, "echo")) job.echo = *e;
  if (auto s = get_str(b, "suffix"); s && !s->empty()) bad_request("suffix", "'suffix' is not supported");
  parse_sampling(b, m, lim, job);
  // Token-id prompts echo as their text (special tokens as skip_special_tokens says); strings as given.
  for (size_t i = job.echo_texts.size(); job.echo && i < job.prompts.size(); ++i)
    job.echo_texts.push_back(m.tokenizer->decode(job.prompts[i], job.skip_special_tokens));
  resolve_max_tokens(b, m, job, 16);
  if (auto v = get_int(b, "logprobs", 0, 5)) {
    // OpenAI and vLLM then list the prompt tokens' logprobs too: prompt logprobs are not computed here.
    if (job.echo)
      bad_request("echo",
                  "'echo' together with 'logprobs' needs the prompt tokens' logprobs, which this server "
                  "does not compute; use one or the other");
    job.logprobs = true;
    job.top_logprobs = *v;
    job.params.logprobs = *v;
  }
  if (static_cast<int64_t>(job.prompts.size()) * job.params.n > 64) bad_request("n", "prompts x n must be at most 64");
  OutputConstraintSpec spec;
  parse_response_format(b, spec);
  attach_constraint(m, spec, job);
  check_response_size(b, lim, job);
  return job;
}

}  // namespace tessera::server
