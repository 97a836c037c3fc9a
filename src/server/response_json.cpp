#include "server/response_json.h"

#include <algorithm>

#include "server/api_error.h"

namespace tessera::server {
namespace {

OJson chat_logprobs(const std::vector<engine::SampledToken>& tokens, const text::Tokenizer& tok) {
  OJson content = OJson::array();
  auto entry = [&](int32_t id, float lp) {
    OJson e;
    const std::string bytes = tok.has_id(id) ? std::string(tok.token_bytes(id)) : std::string();
    e["token"] = bytes;
    e["logprob"] = lp;
    OJson b = OJson::array();
    for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
    e["bytes"] = std::move(b);
    return e;
  };
  for (const auto& t : tokens) {
    OJson e = entry(t.token, t.logprob);
    OJson top = OJson::array();
    for (const auto& a : t.top) top.push_back(entry(a.token, a.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return OJson{{"content", std::move(content)}};
}

OJson completion_logprobs(const std::vector<engine::SampledToken>& tokens, int64_t& offset,
                          const text::Tokenizer& tok) {
  OJson toks = OJson::array(), lps = OJson::array(), tops = OJson::array(), offs = OJson::array();
  auto str = [&](int32_t id) { return tok.has_id(id) ? std::string(tok.token_bytes(id)) : std::string(); };
  for (const auto& t : tokens) {
    const std::string s = str(t.token);
    toks.push_back(s);
    lps.push_back(t.logprob);
    // The legacy completions API always lists the sampled token beside the top `logprobs` (up to
    // logprobs + 1 entries, as OpenAI and vLLM do), so `logprobs: 0` still gives one entry a token.
    OJson top = OJson::object();
    for (const auto& a : t.top) top[str(a.token)] = a.logprob;
    if (!top.contains(s)) top[s] = t.logprob;
    tops.push_back(std::move(top));
    offs.push_back(offset);
    offset += static_cast<int64_t>(s.size());
  }
  return OJson{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

OJson base(const ResponseMeta& m, const char* object) {
  return OJson{
      {"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}, {"system_fingerprint", nullptr}};
}

OJson tool_call_delta_json(const std::vector<text::ToolCallDelta>& deltas) {
  // Adjacent deltas of one call (its header and first argument text) are merged into one entry.
  OJson arr = OJson::array();
  for (const auto& d : deltas) {
    if (!arr.empty() && arr.back()["index"] == d.index) {
      auto& f = arr.back()["function"];
      f["arguments"] = f.value("arguments", std::string()) + d.arguments;
      continue;
    }
    OJson e{{"index", d.index}};
    if (d.id) e["id"] = *d.id, e["type"] = "function";
    OJson f = OJson::object();
    if (d.name) f["name"] = *d.name;
    f["arguments"] = d.arguments;
    e["function"] = std::move(f);
    arr.push_back(std::move(e));
  }
  return arr;
}

}  // namespace

std::string dump(const OJson& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void accumulate(ChoiceAccum& acc, const ChoiceEvent& ev) {
  acc.content += ev.delta.content;
  acc.reasoning += ev.delta.reasoning;
  for (const auto& d : ev.delta.tool_calls) {
    auto& tc = acc.tool_calls[d.index];
    if (d.id) tc.id = *d.id;
    if (d.name) tc.name = *d.name;
    tc.arguments += d.arguments;
  }
  acc.tokens.insert(acc.tokens.end(), ev.tokens.begin(), ev.tokens.end());
  if (ev.finish_reason) acc.finish_reason = ev.finish_reason;
  if (ev.stop_string) acc.stop_string = ev.stop_string;
  if (ev.complete_tool_calls)
    acc.tool_calls.erase(acc.tool_calls.lower_bound(*ev.complete_tool_calls), acc.tool_calls.end());
}

OJson error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  OJson e{{"message", message},
          {"type", error_type(status)},
          {"param", param.empty() ? OJson() : OJson(param)},
          {"code", code.empty() ? std::string(error_code(status, param)) : code}};
  return OJson{{"error", std::move(e)}};
}

OJson usage_json(const Usage& u, bool chat) {
  OJson j{{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = OJson{{"cached_tokens", u.cached_tokens}};
  if (chat) j["completion_tokens_details"] = OJson{{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

OJson chat_role_chunk(const ResponseMeta& m, int64_t index) {
  OJson j = base(m, "chat.completion.chunk");
  j["choices"] = OJson::array({OJson{{"index", index},
                                     {"delta", OJson{{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
  return j;
}

OJson chat_chunk(const ResponseMeta& m, const ChoiceEvent& ev, const GenerationJob& job, const text::Tokenizer& tok) {
  OJson delta = OJson::object();
  if (!ev.delta.reasoning.empty() && job.include_reasoning) {
    delta["reasoning_content"] = ev.delta.reasoning;
    delta["reasoning"] = ev.delta.reasoning;
  }
  if (!ev.delta.content.empty()) delta["content"] = ev.delta.content;
  if (!ev.delta.tool_calls.empty()) delta["tool_calls"] = tool_call_delta_json(ev.delta.tool_calls);
  const bool lp = job.logprobs && !ev.tokens.empty();
  if (delta.empty() && !ev.finish_reason && !lp) return OJson();
  OJson c{{"index", ev.index}, {"delta", std::move(delta)}};
  c["logprobs"] = lp ? chat_logprobs(ev.tokens, tok) : OJson();
  c["finish_reason"] = ev.finish_reason ? OJson(*ev.finish_reason) : OJson();
  OJson j = base(m, "chat.completion.chunk");
  j["choices"] = OJson::array({std::move(c)});
  return j;
}

OJson chat_response(const ResponseMeta& m, const std::vector<ChoiceAccum>& choices, const Usage& u,
                    const GenerationJob& job, const text::Tokenizer& tok) {
  OJson j = base(m, "chat.completion");
  OJson arr = OJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceAccum& a = choices[i];
    OJson msg{{"role", "assistant"}};
    const bool has_tools = !a.tool_calls.empty();
    const bool has_reasoning = !a.reasoning.empty() && job.include_reasoning;
    msg["content"] = (a.content.empty() && (has_tools || has_reasoning)) ? OJson() : OJson(a.content);
    msg["reasoning_content"] = has_reasoning ? OJson(a.reasoning) : OJson();
    msg["reasoning"] = msg["reasoning_content"];
    if (has_tools) {
      OJson calls = OJson::array();
      for (const auto& [idx, tc] : a.tool_calls)
        calls.push_back(OJson{
            {"id", tc.id}, {"type", "function"}, {"function", OJson{{"name", tc.name}, {"arguments", tc.arguments}}}});
      msg["tool_calls"] = std::move(calls);
    }
    OJson c{{"index", static_cast<int64_t>(i)}, {"message", std::move(msg)}};
    c["logprobs"] = job.logprobs ? chat_logprobs(a.tokens, tok) : OJson();
    c["finish_reason"] = a.finish_reason ? OJson(*a.finish_reason) : OJson("stop");
    arr.push_back(std::move(c));
  }
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(u, true);
  return j;
}

OJson completion_chunk(const ResponseMeta& m, const ChoiceEvent& ev, ChoiceAccum& acc, const GenerationJob& job,
                       const text::Tokenizer& tok) {
  const bool lp = job.logprobs && !ev.tokens.empty();
  if (ev.delta.content.empty() && !ev.finish_reason && !lp) return OJson();
  OJson c{{"index", ev.index}, {"text", ev.delta.content}};
  c["logprobs"] = lp ? completion_logprobs(ev.tokens, acc.text_offset, tok) : OJson();
  c["finish_reason"] = ev.finish_reason ? OJson(*ev.finish_reason) : OJson();
  OJson j = base(m, "text_completion");
  j["choices"] = OJson::array({std::move(c)});
  return j;
}

std::string echo_text(const GenerationJob& job, int64_t choice) {
  if (!job.echo) return {};
  return job.echo_texts.at(static_cast<size_t>(choice / std::max<int64_t>(job.params.n, 1)));
}

OJson completion_echo_chunk(const ResponseMeta& m, const GenerationJob& job, int64_t choice) {
  OJson j = base(m, "text_completion");
  j["choices"] = OJson::array(
      {OJson{{"index", choice}, {"text", echo_text(job, choice)}, {"logprobs", OJson()}, {"finish_reason", OJson()}}});
  return j;
}

OJson completion_response(const ResponseMeta& m, const std::vector<ChoiceAccum>& choices, const Usage& u,
                          const GenerationJob& job, const text::Tokenizer& tok) {
  OJson j = base(m, "text_completion");
  OJson arr = OJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceAccum& a = choices[i];
    OJson c{{"index", static_cast<int64_t>(i)}, {"text", echo_text(job, static_cast<int64_t>(i)) + a.content}};
    int64_t off = 0;
    c["logprobs"] = job.logprobs ? completion_logprobs(a.tokens, off, tok) : OJson();
    c["finish_reason"] = a.finish_reason ? OJson(*a.finish_reason) : OJson("stop");
    arr.push_back(std::move(c));
  }
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(u, false);
  return j;
}

OJson usage_chunk(const ResponseMeta& m, const Usage& u, bool chat) {
  OJson j = base(m, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = OJson::array();
  j["usage"] = usage_json(u, chat);
  return j;
}

}  // namespace tessera::server
