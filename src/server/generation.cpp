#include "server/generation.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"

namespace tessera::server {

using Clock = std::chrono::steady_clock;

Generation::Generation(engine::Engine& engine, const ServedModel& model, const GenerationJob& job, std::string id,
                       ServerMetrics* metrics)
    : engine_(engine), job_(job), metrics_(metrics), start_(Clock::now()) {
  const int64_t n = job.params.n;
  for (size_t k = 0; k < job.prompts.size(); ++k) {
    for (int64_t i = 0; i < n; ++i) {
      text::OutputParserOptions po;
      if (job.endpoint == Endpoint::kChat) {
        po.reasoning = model.reasoning;
        po.start = job.reasoning_start;
        if (job.parse_tools) po.tools = model.tools;
        po.tool_names = job.tool_names;
      }
      po.skip_special_tokens = job.skip_special_tokens;
      po.stop_strings = job.stop;
      po.include_stop_string = job.include_stop_str;
      // Unique across the conversation: the client sends the id back with the tool result.
      po.tool_call_id_prefix = fmt::format("call_{}_{}_", id.substr(id.find('-') + 1), choices_.size());
      Choice c;
      c.parser = std::make_unique<text::OutputParser>(*model.tokenizer, std::move(po));
      c.last = start_;
      choices_.push_back(std::move(c));
    }
  }
  remaining_ = static_cast<int64_t>(choices_.size());
  for (size_t k = 0; k < job.prompts.size(); ++k) {
    engine::Request r;
    r.id = job.prompts.size() == 1 ? id : fmt::format("{}-{}", id, k);
    r.prompt = job.prompts[k];
    r.params = job.params;
    Sub s;
    s.id = r.id;
    s.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    try {
      s.stream = engine.submit(std::move(r));
    } catch (const core::Error& e) {
      abort();
      throw ApiError(400, e.what());
    }
    subs_.push_back(std::move(s));
  }
}

Generation::~Generation() {
  if (remaining_ > 0) abort();
}

void Generation::abort() {
  for (auto& s : subs_)
    if (!s.finished) engine_.abort(s.id);
  if (remaining_ > 0 && metrics_) metrics_->requests_aborted++;
  for (auto& s : subs_) s.finished = true;
  for (auto& c : choices_) c.done = true;
  remaining_ = 0;
  record_end();
}

void Generation::finish_choice(int64_t index, const std::string& reason, ChoiceEvent& ev) {
  Choice& c = choices_[static_cast<size_t>(index)];
  ev.delta.append(c.parser->finish());
  std::string r = reason;
  if (c.parser->stopped()) {
    r = "stop";
    ev.stop_string = c.parser->stop_string();
  }
  if (r == "stop" && !c.parser->tool_calls().empty() && !job_.named_tool_choice) r = "tool_calls";
  ev.finish_reason = r;
  if (c.parser->tool_call_cut()) ev.complete_tool_calls = static_cast<int64_t>(c.parser->tool_calls().size());
  c.done = true;
  --remaining_;
}

void Generation::handle(size_t sub, engine::RequestOutput&& o, std::vector<ChoiceEvent>& out) {
  Sub& s = subs_[sub];
  s.cached = std::max(s.cached, o.cached_prompt_tokens);
  const int64_t index = static_cast<int64_t>(sub) * job_.params.n + o.index;
  if (index < 0 || index >= static_cast<int64_t>(choices_.size())) return;
  Choice& c = choices_[static_cast<size_t>(index)];
  if (c.done) return;
  ChoiceEvent ev;
  ev.index = index;
  if (o.token) {
    const auto now = Clock::now();
    if (metrics_) {
      if (first_token_)
        metrics_->ttft.observe(std::chrono::duration<double>(now - start_).count());
      else if (c.tokens > 0)
        metrics_->itl.observe(std::chrono::duration<double>(now - c.last).count());
    }
    first_token_ = false;
    c.last = now;
    ++c.tokens;
    ev.delta = c.parser->add(o.token->token);
    ev.tokens.push_back(*o.token);
  }
  if (c.parser->stopped()) {
    finish_choice(index, "stop", ev);
  } else if (o.finish != engine::FinishReason::kNone) {
    if (o.finish == engine::FinishReason::kAbort) engine_failed_ = true;
    finish_choice(index, engine::finish_reason_name(o.finish), ev);
  }
  out.push_back(std::move(ev));
  // Every choice of this engine request ended (e.g. on stop strings): release its KV now.
  bool all = true;
  for (int64_t i = 0; i < job_.params.n; ++i)
    all = all && choices_[static_cast<size_t>(static_cast<int64_t>(sub) * job_.params.n + i)].done;
  if (all && !s.finished) {
    s.finished = true;
    if (o.finish == engine::FinishReason::kNone) engine_.abort(s.id);
  }
}

bool Generation::poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds timeout) {
  if (remaining_ == 0) return false;
  const auto deadline = Clock::now() + timeout;
  bool got = false;
  while (!got) {
    for (size_t k = 0; k < subs_.size(); ++k) {
      Sub& s = subs_[k];
      if (s.finished) continue;
      while (auto o = s.stream->try_pop()) {
        got = true;
        handle(k, std::move(*o), out);
        if (s.finished) break;
      }
      if (!s.finished && s.stream->closed()) {
        // The engine closed the stream without finishing every choice (should not happen).
        s.finished = true;
        for (int64_t i = 0; i < job_.params.n; ++i) {
          const int64_t idx = static_cast<int64_t>(k) * job_.params.n + i;
          if (!choices_[static_cast<size_t>(idx)].done) {
            ChoiceEvent ev;
            ev.index = idx;
            engine_failed_ = true;
            finish_choice(idx, "abort", ev);
            out.push_back(std::move(ev));
          }
        }
        got = true;
      }
    }
    if (remaining_ == 0 || got) break;
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Block on the first live stream; others are picked up on the next round.
    for (auto& s : subs_) {
      if (s.finished) continue;
      auto wait = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(subs_.size() > 1 ? 2 : 50));
      if (auto o = s.stream->pop_for(wait)) {
        got = true;
        handle(static_cast<size_t>(&s - subs_.data()), std::move(*o), out);
      }
      break;
    }
  }
  if (remaining_ == 0) record_end();
  return remaining_ > 0;
}

Usage Generation::usage() const {
  Usage u;
  for (const auto& s : subs_) {
    u.prompt_tokens += s.prompt_tokens;
    u.cached_tokens += s.cached;
  }
  for (const auto& c : choices_) {
    u.completion_tokens += c.tokens;
    u.reasoning_tokens += c.parser->reasoning_tokens();
  }
  return u;
}

void Generation::record_end() {
  if (recorded_ || !metrics_) return;
  recorded_ = true;
  const Usage u = usage();
  metrics_->prompt_tokens += u.prompt_tokens;
  metrics_->cached_prompt_tokens += u.cached_tokens;
  metrics_->generation_tokens += u.completion_tokens;
  metrics_->reasoning_tokens += u.reasoning_tokens;
  metrics_->requests_finished++;
  metrics_->e2e.observe(std::chrono::duration<double>(Clock::now() - start_).count());
}

}  // namespace tessera::server
