#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"

namespace tessera::engine {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool contains(const std::vector<int32_t>& v, int32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); }

void validate(const Request& r, int64_t vocab, int64_t max_model_len, int64_t pool_tokens) {
  const auto& p = r.params;
  const std::string& id = r.id;
  TESSERA_CHECK(!r.prompt.empty(), "request '{}': the prompt is empty", id);
  for (int32_t t : r.prompt)
    TESSERA_CHECK(t >= 0 && t < vocab, "request '{}': prompt token id {} is outside the vocabulary [0, {})", id, t,
                  vocab);
  TESSERA_CHECK(p.n >= 1, "request '{}': n must be >= 1, got {}", id, p.n);
  TESSERA_CHECK(p.max_tokens >= 1, "request '{}': max_tokens must be >= 1, got {}", id, p.max_tokens);
  TESSERA_CHECK(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens,
                "request '{}': min_tokens must be in [0, max_tokens = {}], got {}", id, p.max_tokens, p.min_tokens);
  TESSERA_CHECK(p.temperature >= 0.0f, "request '{}': temperature must be >= 0, got {}", id, p.temperature);
  TESSERA_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "request '{}': top_p must be in (0, 1], got {}", id, p.top_p);
  TESSERA_CHECK(p.top_k >= -1, "request '{}': top_k must be -1, 0 (off) or positive, got {}", id, p.top_k);
  TESSERA_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "request '{}': min_p must be in [0, 1], got {}", id, p.min_p);
  TESSERA_CHECK(p.repetition_penalty > 0.0f, "request '{}': repetition_penalty must be > 0, got {}", id,
                p.repetition_penalty);
  if (p.budgeted_region) {
    TESSERA_CHECK(!p.budgeted_region->end_ids.empty(), "request '{}': the budgeted region needs end token ids", id);
    TESSERA_CHECK(p.budgeted_region->budget >= 0, "request '{}': the region budget must be >= 0", id);
  }
#if TESSERA_TEST_HOOKS
  for (int32_t t : p.scripted_tokens)
    TESSERA_CHECK(t >= 0 && t < vocab, "request '{}': scripted token id {} is outside the vocabulary [0, {})", id, t,
                  vocab);
#endif
  const int64_t prompt = static_cast<int64_t>(r.prompt.size()), total = prompt + p.max_tokens;
  TESSERA_CHECK(total <= max_model_len,
                "request '{}': prompt ({} tokens) + max_tokens ({}) = {} exceeds max_model_len {} "
                "(raise --max-model-len / --kv-cache-bytes or lower max_tokens)",
                id, prompt, p.max_tokens, total, max_model_len);
  TESSERA_CHECK(total <= pool_tokens,
                "request '{}': prompt ({} tokens) + max_tokens ({}) = {} does not fit the KV cache of {} tokens "
                "(raise --kv-cache-bytes)",
                id, prompt, p.max_tokens, total, pool_tokens);
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

Engine::Engine(model::Model& model, model::KvCache cache, EngineConfig config)
    : Engine(std::make_unique<LocalExecutor>(model, std::move(cache)), config) {}

Engine::Engine(std::unique_ptr<Executor> executor, EngineConfig config)
    : executor_(std::move(executor)),
      config_(config),
      blocks_(executor_->num_pages(), executor_->page_size(), config.enable_prefix_caching),
      scheduler_({config.max_num_batched_tokens, config.max_num_seqs}, blocks_),
      pacer_(config.max_step_stretch) {
  const int64_t pool_tokens = executor_->num_pages() * executor_->page_size();
  const int64_t model_max = executor_->config().max_position_embeddings;
  if (config_.max_model_len <= 0) config_.max_model_len = std::min(pool_tokens, model_max);
  TESSERA_CHECK(config_.max_model_len <= model_max, "max_model_len {} exceeds the model's max_position_embeddings {}",
                config_.max_model_len, model_max);
  metrics_.kv_pages_total = executor_->num_pages();
}

Engine::~Engine() { stop(); }

OutputStreamPtr Engine::submit(Request request) {
  validate(request, executor_->config().vocab_size, config_.max_model_len,
           executor_->num_pages() * executor_->page_size());
  auto state = std::make_unique<RequestState>();
  state->stream = std::make_shared<OutputStream>();
  state->request = std::move(request);
  OutputStreamPtr stream = state->stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loop_failure_) {
      // Nothing will ever step this request: it ends now, as the requests of a failed step do.
      for (int64_t i = 0; i < state->request.params.n; ++i) {
        RequestOutput out;
        out.index = i;
        out.finish = FinishReason::kAbort;
        out.prompt_tokens = static_cast<int64_t>(state->request.prompt.size());
        stream->push(std::move(out));
      }
      stream->close();
      return stream;
    }
    TESSERA_CHECK(!submitted_.contains(state->request.id), "request id '{}' is already in use", state->request.id);
    submitted_.emplace(state->request.id, stream);
    incoming_.push_back(std::move(state));
  }
  cv_.notify_all();
  return stream;
}

void Engine::abort(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

void Engine::take_incoming() {
  std::deque<std::unique_ptr<RequestState>> incoming;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(incoming_);
    aborts.swap(aborts_);
  }
  for (auto& state : incoming) {
    const auto& p = state->request.params;
    const uint64_t base_seed = p.seed ? *p.seed : std::random_device{}() * 0x100000001ull;
    for (int64_t i = 0; i < p.n; ++i) {
      // Samples of one request draw from different streams; sample 0 uses the seed as given.
      auto seq = std::make_unique<Sequence>(state.get(), i, next_order_++, state->request.prompt,
                                            base_seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
      if (p.budgeted_region) seq->budget = BudgetTracker(*p.budgeted_region, state->request.prompt);
      if (p.constraint) seq->constraint = p.constraint->create();
      if (i > 0) seq->wait_for = state->samples[0].get();
      state->samples.push_back(std::move(seq));
    }
    state->unfinished = p.n;
    for (auto& seq : state->samples) scheduler_.add(seq.get());
    std::string id = state->request.id;
#if TESSERA_TEST_HOOKS
    const bool fault = contains(state->request.prompt, test_loop_fault_token_);
#endif
    live_[id] = std::move(state);
#if TESSERA_TEST_HOOKS
    if (fault)
      core::fail("injected engine-thread failure (request '{}' holds the test loop-fault token {})", id,
                 test_loop_fault_token_);
#endif
  }
  for (const auto& id : aborts) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    RequestState* state = it->second.get();
    for (auto& seq : state->samples)
      if (seq->status != SeqStatus::kFinished) finish(seq.get(), FinishReason::kAbort, std::nullopt);
  }
}

void Engine::finish(Sequence* seq, FinishReason reason, std::optional<SampledToken> token) {
  seq->status = SeqStatus::kFinished;
  scheduler_.remove(seq);
  RequestState* state = seq->request;
  RequestOutput out;
  out.index = seq->index;
  out.token = std::move(token);
  out.finish = reason;
  out.prompt_tokens = seq->prompt_len;
  out.cached_prompt_tokens = std::max<int64_t>(seq->cached_prompt_tokens, 0);
  state->stream->push(std::move(out));
  if (--state->unfinished > 0) return;
  state->stream->close();
  const std::string id = state->request.id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_.erase(id);
  }
  ++finished_;
  live_.erase(id);  // destroys `seq`
}

namespace {

// What sampling needs to know about a sequence's next token; SampleContext points into it.
struct NextToken {
  std::vector<int32_t> masked;
  std::vector<uint32_t> allowed;  // constrained decoding's bitmask; empty: unconstrained
  SampleContext ctx;
  bool scripted = false;  // the token is the request's scripted one (a test hook standing for a draw)
};

void next_token_context(Sequence& seq, int64_t vocab, NextToken& nt) {
  const SamplingParams& p = seq.request->request.params;
  nt.masked.clear();
  nt.allowed.clear();
  if (seq.num_generated() < p.min_tokens) {
    nt.masked = p.stop_token_ids;
    if (!p.ignore_eos) nt.masked.insert(nt.masked.end(), p.eos_token_ids.begin(), p.eos_token_ids.end());
  }
  SampleContext& ctx = nt.ctx;
  ctx = SampleContext{};
  ctx.prompt = std::span<const int32_t>(seq.tokens.data(), static_cast<size_t>(seq.prompt_len));
  ctx.generated =
      std::span<const int32_t>(seq.tokens.data() + seq.prompt_len, static_cast<size_t>(seq.num_generated()));
  ctx.forced = p.budgeted_region ? seq.budget.forced_token() : -1;
  if (ctx.forced < 0 && seq.constraint && seq.constraint->active()) {
    nt.allowed.resize(token_bitmask_words(vocab));
    seq.constraint->fill_allowed(nt.allowed);
  }
  nt.scripted = false;
#if TESSERA_TEST_HOOKS
  const int64_t g = seq.num_generated();
  // A scripted token the constraint refuses is not forced: the constrained draw replaces it, as it
  // would replace a model's favourite token.
  nt.scripted = ctx.forced < 0 && g < static_cast<int64_t>(p.scripted_tokens.size()) &&
                (nt.allowed.empty() || token_allowed(nt.allowed, p.scripted_tokens[static_cast<size_t>(g)]));
  if (nt.scripted) ctx.forced = p.scripted_tokens[static_cast<size_t>(g)];
#endif
  ctx.masked = nt.masked;
  ctx.allowed = nt.allowed;
}

}  // namespace

std::vector<std::optional<SampledToken>> Engine::sample_step(const std::vector<ScheduledChunk>& plan,
                                                             const core::Tensor& logits) {
  ops::Ops& ops = executor_->sampling_ops();
  const int64_t vocab = logits.dim(1);
  std::vector<std::optional<SampledToken>> out(plan.size());
  std::vector<int64_t> op_rows, host_rows;
  std::vector<ops::SampleRow> op_params;
  std::vector<uint32_t> op_masks;  // constrained decoding: op rows x words, once any op row has a mask
  bool op_masked = false;
  const size_t words = token_bitmask_words(vocab);
  std::vector<NextToken> host_next;
  bool op_logprobs = false;
  NextToken nt;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence* s = plan[i].seq;
    if (s->num_pending() != plan[i].num_tokens) continue;  // a prefill chunk short of the end: no token yet
    next_token_context(*s, vocab, nt);
    const SamplingParams& p = s->request->request.params;
    if (op_can_sample(p, nt.ctx, vocab)) {
      if (!nt.allowed.empty() && !op_masked) {
        op_masked = true;
        op_masks.assign(op_rows.size() * words, ~0u);
      }
      if (op_masked) {
        if (nt.allowed.empty())
          op_masks.insert(op_masks.end(), words, ~0u);
        else
          op_masks.insert(op_masks.end(), nt.allowed.begin(), nt.allowed.end());
      }
      op_rows.push_back(static_cast<int64_t>(i));
      op_params.push_back(op_sample_row(p, s->rng));
      op_logprobs = op_logprobs || p.logprobs.has_value();
    } else {
      host_rows.push_back(static_cast<int64_t>(i));
      host_next.push_back(std::move(nt));
      nt = NextToken{};
    }
  }
  // The logits rows of `rows`, without a copy when they are all of them.
  auto rows_of = [&](const std::vector<int64_t>& rows) {
    if (rows.size() == plan.size()) return logits;
    core::Tensor x = ops.empty({static_cast<int64_t>(rows.size()), vocab});
    ops.gather_rows(logits, rows, x);
    return x;
  };
  if (!op_rows.empty()) {
    const auto n = static_cast<int64_t>(op_rows.size());
    core::Tensor ids = ops.empty_i32({n}), lp = op_logprobs ? ops.empty({n}) : core::Tensor();
    core::Tensor x = rows_of(op_rows);
    if (op_masked) ops.mask_logits(x, op_masks);  // the step's logits are not read again
    ops.sample(x, op_params, ids, op_logprobs ? &lp : nullptr);
    const std::vector<int32_t> h_ids = ops.to_host_i32(ids);
    const std::vector<float> h_lp = op_logprobs ? ops.to_host_f32(lp) : std::vector<float>();
    for (size_t j = 0; j < op_rows.size(); ++j) {
      SampledToken t;
      t.token = h_ids[j];
      if (plan[static_cast<size_t>(op_rows[j])].seq->request->request.params.logprobs) t.logprob = h_lp[j];
      out[static_cast<size_t>(op_rows[j])] = std::move(t);
    }
  }
  if (!host_rows.empty()) {
    const std::vector<float> h = ops.to_host_f32(rows_of(host_rows));
    for (size_t j = 0; j < host_rows.size(); ++j) {
      Sequence* s = plan[static_cast<size_t>(host_rows[j])].seq;
      const std::span<const float> row(h.data() + static_cast<int64_t>(j) * vocab, static_cast<size_t>(vocab));
      SampledToken t = sample_token(row, s->request->request.params, host_next[j].ctx, s->rng);
      if (host_next[j].scripted) t.forced = false;  // a scripted token stands for a drawn one: stop/EOS apply
      out[static_cast<size_t>(host_rows[j])] = std::move(t);
    }
  }
  return out;
}

void Engine::emit_token(Sequence* seq, SampledToken tok) {
  const SamplingParams& p = seq->request->request.params;
  seq->tokens.push_back(tok.token);
  seq->budget.observe(tok.token);
  if (seq->constraint && !seq->constraint->advance(tok.token)) {
    // Only a forced token (the reasoning budget closing <think>) can get here, as drawn ones come
    // from the allowed set: say so rather than pretend the output is still constrained.
    spdlog::warn(
        "request '{}': token {} broke its output constraint (response_format / tool_choice); the rest of "
        "this sample is unconstrained",
        seq->request->request.id, tok.token);
    seq->constraint.reset();
  }

  FinishReason reason = FinishReason::kNone;
  const bool is_stop = contains(p.stop_token_ids, tok.token) || (!p.ignore_eos && contains(p.eos_token_ids, tok.token));
  if (is_stop && seq->num_generated() > p.min_tokens - 1 && !tok.forced)
    reason = FinishReason::kStop;
  else if (seq->num_generated() >= p.max_tokens || static_cast<int64_t>(seq->tokens.size()) >= config_.max_model_len)
    reason = FinishReason::kLength;
  if (reason != FinishReason::kNone) {
    finish(seq, reason, std::move(tok));
    return;
  }
  RequestOutput out;
  out.index = seq->index;
  out.token = std::move(tok);
  out.prompt_tokens = seq->prompt_len;
  out.cached_prompt_tokens = std::max<int64_t>(seq->cached_prompt_tokens, 0);
  seq->request->stream->push(std::move(out));
}

void Engine::fail_all() {
  std::vector<Sequence*> seqs;
  for (auto& [id, state] : live_)
    for (auto& seq : state->samples)
      if (seq->status != SeqStatus::kFinished) seqs.push_back(seq.get());
  for (Sequence* s : seqs) finish(s, FinishReason::kAbort, std::nullopt);
}

bool Engine::step() {
  const double t_begin = now_seconds();
  take_incoming();
  std::vector<ScheduledChunk> plan =
      scheduler_.schedule([this](int64_t decodes, int64_t backlog) { return pacer_.prefill_cap(decodes, backlog); });
  int64_t generated = 0;
  if (!plan.empty()) {
    int64_t decodes = 0, prefill = 0;
    for (const auto& c : plan) (c.decode ? decodes : prefill) += c.num_tokens;
    model::StepBatch batch;
    for (const auto& c : plan) {
      Sequence* s = c.seq;
      batch.token_ids.insert(batch.token_ids.end(), s->tokens.begin() + s->num_computed,
                             s->tokens.begin() + s->num_computed + c.num_tokens);
      model::SequenceStep ss;
      ss.start_pos = s->num_computed;
      ss.num_tokens = c.num_tokens;
      ss.block_table.assign(
          s->block_table.begin(),
          s->block_table.begin() + model::pages_for_tokens(s->num_computed + c.num_tokens, executor_->page_size()));
      batch.seqs.push_back(std::move(ss));
      if (s->num_computed < s->prompt_len)
        prompt_tokens_computed_ += std::min(c.num_tokens, s->prompt_len - s->num_computed);
    }
    try {
      const double t0 = now_seconds();
      const core::Tensor logits = executor_->execute(batch);
      const double t1 = now_seconds();
      std::vector<std::optional<SampledToken>> tokens = sample_step(plan, logits);  // waits for the step
      const double t2 = now_seconds();
      pacer_.observe(decodes, prefill, t2 - t0);
      for (size_t i = 0; i < plan.size(); ++i) {
        scheduler_.on_computed(plan[i]);
        if (tokens[i]) {  // the chunk reached the end: its row predicted the next token
          emit_token(plan[i].seq, std::move(*tokens[i]));
          ++generated;
        }
      }
      if (prefill == 0) {
        StepTimes& d = decode_steps_;
        ++d.steps;
        d.before_execute_s += t0 - t_begin;
        d.execute_s += t1 - t0;
        d.sample_wait_s += t2 - t1;
        d.after_s += now_seconds() - t2;
      }
    } catch (const std::exception& e) {
      spdlog::error("engine step failed, aborting {} requests: {}", live_.size(), e.what());
      fail_all();
    }
  }
  ++steps_;
  generated_tokens_ += generated;
  update_metrics(generated);
  std::lock_guard<std::mutex> lock(mutex_);
  return has_work_locked();
}

bool Engine::has_work_locked() const {
  return !incoming_.empty() || !aborts_.empty() || scheduler_.num_waiting() > 0 || scheduler_.num_running() > 0;
}

void Engine::update_metrics(int64_t generated) {
  const double now = now_seconds();
  recent_.emplace_back(now, generated);
  while (recent_.size() > 1 && now - recent_.front().first > 5.0) recent_.pop_front();
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  EngineMetrics& m = metrics_;
  m.waiting = scheduler_.num_waiting();
  m.running = scheduler_.num_running();
  m.kv_pages_used = blocks_.num_used();
  m.kv_pages_cached_idle = blocks_.num_cached_idle();
  m.kv_pages_total = blocks_.num_pages();
  const auto& st = scheduler_.stats();
  m.prefix_query_tokens = st.prefix_query_tokens;
  m.prefix_hit_tokens = st.prefix_hit_tokens;
  m.prefix_hit_rate =
      st.prefix_query_tokens > 0 ? static_cast<double>(st.prefix_hit_tokens) / st.prefix_query_tokens : 0;
  m.preemptions = st.preemptions;
  m.paced_steps = pacer_.paced_steps();
  m.widened_steps = pacer_.widened_steps();
  m.prompt_tokens_computed = prompt_tokens_computed_;
  m.generated_tokens = generated_tokens_;
  m.steps = steps_;
  m.requests_finished = finished_;
  int64_t window_tokens = 0;
  for (size_t i = 1; i < recent_.size(); ++i) window_tokens += recent_[i].second;
  const double span = recent_.back().first - recent_.front().first;
  m.tokens_per_second = span > 0 ? window_tokens / span : 0;
  m.decode_steps = decode_steps_;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  EngineMetrics m = metrics_;
  std::lock_guard<std::mutex> lock2(mutex_);
  m.waiting += static_cast<int64_t>(incoming_.size());
  return m;
}

void Engine::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(!thread_.joinable(), "engine already started");
  stop_ = false;
  thread_ = std::thread([this] { run_loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::run_loop() {
  // An exception escaping the thread's function would call std::terminate: no log line, no answer
  // to the requests in flight, and a server that cannot tell why it died. Catch it, end every
  // request and tell the listener (the server, which then exits non-zero).
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || has_work_locked(); });
        if (stop_) return;
      }
      step();
    }
  } catch (const std::exception& e) {
    die(e.what());
  } catch (...) {
    die("an exception of unknown type");
  }
}

void Engine::die(const std::string& why) {
  spdlog::critical("the engine thread died: {}", why);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_failure_ = why;
  }
  // The listener first, so that whoever reads a request's end (the server) already knows why.
  {
    std::lock_guard<std::mutex> lock(listener_mutex_);
    if (loop_failure_listener_ && !loop_failure_told_) {
      loop_failure_told_ = true;
      loop_failure_listener_(why);
    }
  }
  // Requests the loop had taken in end as those of a failed step do (kAbort per sample)...
  try {
    fail_all();
  } catch (const std::exception& e) {
    spdlog::error("aborting the requests of the dead engine failed too: {}", e.what());
  } catch (...) {
  }
  // ... and every other one still unfinished (queued, or dropped mid-way by the failure) gets its
  // stream closed, which its reader takes as an abnormal end, instead of waiting forever.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, weak] : submitted_)
      if (const auto stream = weak.lock()) stream->close();
    submitted_.clear();
    incoming_.clear();
  }
}

std::optional<std::string> Engine::loop_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loop_failure_;
}

void Engine::on_loop_failure(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  loop_failure_listener_ = std::move(fn);
  loop_failure_told_ = false;
  // Died before this listener came: tell it now (die() tells it otherwise, not both).
  if (const auto why = loop_failure(); why && loop_failure_listener_) {
    loop_failure_told_ = true;
    loop_failure_listener_(*why);
  }
}

}  // namespace tessera::engine
