// Writing responses of admitted requests: the non-streamed body and SSE streams, both built from
// the same generation events (see response_json.h), in the OpenAI chat/completions shape, on
// /v1/messages the Anthropic one (anthropic_messages.h), on /v1/responses the Responses API's
// (openai_responses.h).
#include "server/http_live.h"
#include "server/http_server.h"

namespace tessera::server {

bool HttpServer::run_non_stream(Live& l, std::chrono::steady_clock::time_point until) {
  std::vector<ChoiceEvent> events;
  for (;;) {
    const bool more = l.gen->poll(events, std::chrono::milliseconds(50));
    for (const auto& ev : events) accumulate(l.accum[static_cast<size_t>(ev.index)], ev);
    events.clear();
    if (!more) return false;
    if (abort_all_) {
      l.gen->abort();
      return false;
    }
    if (std::chrono::steady_clock::now() >= until) return true;
  }
}

std::string HttpServer::non_stream_body(Live& l) {
  const Usage u = l.gen->usage();
  if (l.api == Endpoint::kMessages) return dump(messages_response(l.meta, l.accum.at(0), u));
  if (l.api == Endpoint::kResponses) return dump(responses_response(l.meta, l.responses_echo, l.accum.at(0), u));
  return dump(l.api == Endpoint::kChat ? chat_response(l.meta, l.accum, u, l.job, *model_.tokenizer)
                                       : completion_response(l.meta, l.accum, u, l.job, *model_.tokenizer));
}

bool HttpServer::stream_step(Live& l, ResponseSink& sink) {
  const bool chat = l.api == Endpoint::kChat, messages = l.api == Endpoint::kMessages;
  const bool responses = l.api == Endpoint::kResponses;
  auto write = [&](const std::string& s) {
    l.last_write = std::chrono::steady_clock::now();
    return sink.write(s);
  };
  if (l.finished) return false;
  if (!l.started) {
    l.started = true;
    if (messages && !write(l.messages->start())) return l.gen->abort(), false;
    if (responses && !write(l.responses->start())) return l.gen->abort(), false;
    if (chat)
      for (int64_t i = 0; i < l.gen->num_choices(); ++i)
        if (!write(sse(chat_role_chunk(l.meta, i)))) return l.gen->abort(), false;
    if (!chat && !messages && !responses && l.job.echo)
      for (int64_t i = 0; i < l.gen->num_choices(); ++i)
        if (!write(sse(completion_echo_chunk(l.meta, l.job, i)))) return l.gen->abort(), false;
  }
  std::vector<ChoiceEvent> events;
  const bool more = l.gen->poll(events, std::chrono::milliseconds(50));
  for (auto& ev : events) {
    if (ev.finish_reason && *ev.finish_reason == "abort") ev.finish_reason.reset();
    ChoiceAccum& acc = l.accum[static_cast<size_t>(ev.index)];
    std::string out;
    if (messages) {
      out = l.messages->add(ev);
    } else if (responses) {
      out = l.responses->add(ev);
    } else {
      const OJson j = chat ? chat_chunk(l.meta, ev, l.job, *model_.tokenizer)
                           : completion_chunk(l.meta, ev, acc, l.job, *model_.tokenizer);
      if (!j.is_null()) out = sse(j);
    }
    if (!out.empty() && !write(out)) {
      metrics_.count_error(499);  // client closed the stream
      l.gen->abort();
      return false;
    }
  }
  // Nothing to send for a second (queued, or a long prefill): an SSE comment, which clients
  // ignore, finds out whether the client is still there (Anthropic's API has its own ping event).
  const std::string keep_alive = messages ? anthropic_sse(OJson{{"type", "ping"}}) : ": keep-alive\n\n";
  if (more && std::chrono::steady_clock::now() - l.last_write > std::chrono::seconds(1) && !write(keep_alive)) {
    metrics_.count_error(499);
    l.gen->abort();
    return false;
  }
  if (more && abort_all_) {
    l.gen->abort();
    write(stream_error(l.api, 503, "the server shut down before the request finished", &l.responses));
    l.finished = true;
    sink.done();
    return true;
  }
  if (more) return true;
  if (l.gen->engine_failed()) {
    on_engine_failure("the engine failed a step");
    write(stream_error(l.api, 500, "the engine failed while generating this request", &l.responses));
  } else if (messages) {
    write(l.messages->finish(l.gen->usage()));
  } else if (responses) {
    write(l.responses->finish(l.gen->usage()));
  } else {
    if (l.job.include_usage) write(sse(usage_chunk(l.meta, l.gen->usage(), chat)));
    write("data: [DONE]\n\n");
  }
  l.finished = true;
  sink.done();
  return true;
}

}  // namespace tessera::server
