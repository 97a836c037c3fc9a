// The engine: continuous batching of many requests over one model and one paged KV cache. It only
// uses Model::forward and KvCache, so the same code drives the CPU and CUDA backends.
//
// Threading: submit() and abort() may be called from any thread. The step loop runs either on the
// engine's own thread (start()/stop()) or, in tests, by calling step() directly; never both.
// Everything else (sequences, scheduler, block manager) is touched only by the stepping thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/executor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_pacer.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace tessera::engine {

struct EngineConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens per step (prefill chunks + decodes)
  int64_t max_num_seqs = 256;             // sequences per step
  int64_t max_model_len = 0;              // 0: what the KV pool holds, capped by the model
  bool enable_prefix_caching = true;
  // A step that adds prefill tokens beside running decodes may take at most this many times a
  // decode-only step (measured; StepPacer); <= 1: prefill takes what the token budget allows.
  double max_step_stretch = 1.8;
};

// Counters for metrics; a snapshot taken at the end of the last step.
// Where the engine's steps of one kind spend their time, summed over `steps`: the host before
// execute (scheduling, the batch's token ids and block tables), execute's host part (the inputs'
// upload and the kernel launches or a graph replay; a backend that computes synchronously, as the
// CPU one does, spends its compute here), the wait for the device and the sampled tokens, and the
// host after (tokens emitted to the streams, bookkeeping). The device idles during the first and
// last, which bench offline's inter-token latency at large batches includes.
struct StepTimes {
  int64_t steps = 0;
  double before_execute_s = 0, execute_s = 0, sample_wait_s = 0, after_s = 0;
};

struct EngineMetrics {
  int64_t waiting = 0;  // queue depth
  int64_t running = 0;
  int64_t kv_pages_used = 0;         // referenced by sequences
  int64_t kv_pages_cached_idle = 0;  // unreferenced but kept for prefix reuse
  int64_t kv_pages_total = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  double prefix_hit_rate = 0;  // hit / query prompt tokens
  int64_t preemptions = 0;
  int64_t paced_steps = 0;    // steps whose prefill beside decodes the step pacer capped
  int64_t widened_steps = 0;  // of those, the ones widened to a share of the prefill backlog
  int64_t prompt_tokens_computed = 0;
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  int64_t requests_finished = 0;
  double tokens_per_second = 0;  // generated tokens over the last few seconds
  StepTimes decode_steps;        // the steps without prompt tokens (those inter-token latency measures)
};

struct RequestState {
  Request request;
  OutputStreamPtr stream;
  std::vector<std::unique_ptr<Sequence>> samples;
  int64_t unfinished = 0;
};

class Engine {
 public:
  // Steps run on `executor`'s devices (executor.h).
  Engine(std::unique_ptr<Executor> executor, EngineConfig config);
  // One model on its own backend: a LocalExecutor over `model` and `cache`.
  Engine(model::Model& model, model::KvCache cache, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. Throws core::Error at once (with the numbers) for a request
  // that can never run: bad parameters, or prompt + max_tokens beyond max_model_len or the pool.
  OutputStreamPtr submit(Request request);
  // Aborts a live request (no-op for unknown ids); its pages are freed at the next step.
  void abort(const std::string& id);

  // One scheduling step + forward + sampling. Returns whether work remains. A failed forward pass
  // or sampling aborts that step's requests (their streams end with kAbort); anything else thrown
  // propagates.
  bool step();
  // Runs step() on the engine thread until stop().
  void start();
  void stop();

  // Why the engine thread died, once an exception escaped step() on it (a broken invariant, out of
  // memory outside the forward pass); nullopt while it runs. A dead engine never steps again: every
  // request it held ends (kAbort, or a closed stream for one it had not taken in yet), and later
  // submissions are answered with kAbort at once instead of waiting forever.
  std::optional<std::string> loop_failure() const;
  // `fn` is called once, on the dying engine thread, with the reason (at once, here, if the engine
  // already died); a null `fn` removes it and waits for a call in progress to return.
  void on_loop_failure(std::function<void(const std::string&)> fn);
#if TESSERA_TEST_HOOKS
  // Tests: the engine thread dies (throws outside the forward pass) when it takes in a request whose
  // prompt contains `token`; -1: off.
  void set_test_loop_fault_token(int32_t token) { test_loop_fault_token_ = token; }
#endif

  EngineMetrics metrics() const;
  const EngineConfig& config() const { return config_; }
  int64_t num_pages() const { return blocks_.num_pages(); }
  // Empty when no KV page is referenced; only meaningful while the engine is idle.
  std::string leak_report() const { return blocks_.leak_report(); }
  int64_t page_ref_count(int32_t page) const { return blocks_.ref_count(page); }

 private:
  void take_incoming();
  void finish(Sequence* seq, FinishReason reason, std::optional<SampledToken> token);
  // The next token of every plan row whose chunk reaches the end of its sequence (nullopt for the
  // others). Rows that op_can_sample allows are drawn by Ops::sample, on the backend's device, and
  // only their ids come back; the others copy their logits row to the host for sample_token.
  std::vector<std::optional<SampledToken>> sample_step(const std::vector<ScheduledChunk>& plan,
                                                       const core::Tensor& logits);
  // Appends the token, pushes it to the stream and applies the stop / length rules.
  void emit_token(Sequence* seq, SampledToken tok);
  // Ends every live request with kAbort.
  void fail_all();
  void update_metrics(int64_t generated);
  bool has_work_locked() const;
  void run_loop();
  // The engine thread's end after an escaped exception: every request ends, the listener is told.
  void die(const std::string& why);

  std::unique_ptr<Executor> executor_;
  EngineConfig config_;
  BlockManager blocks_;
  Scheduler scheduler_;
  StepPacer pacer_;
  uint64_t next_order_ = 0;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> live_;  // engine thread only

  mutable std::mutex mutex_;  // guards incoming_, aborts_, submitted_, stop_, loop_failure_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<RequestState>> incoming_;
  std::vector<std::string> aborts_;
  // Requests not yet finished, by id: for duplicate ids, and so that a dying engine thread can close
  // the stream of every one of them, wherever the failure left it.
  std::unordered_map<std::string, std::weak_ptr<OutputStream>> submitted_;
  bool stop_ = false;
  std::optional<std::string> loop_failure_;
  std::thread thread_;
  std::mutex listener_mutex_;  // held while the loop-failure listener runs
  std::function<void(const std::string&)> loop_failure_listener_;
  bool loop_failure_told_ = false;  // the listener has been called
#if TESSERA_TEST_HOOKS
  int32_t test_loop_fault_token_ = -1;
#endif

  mutable std::mutex metrics_mutex_;
  EngineMetrics metrics_;
  std::deque<std::pair<double, int64_t>> recent_;  // (time, generated) per step, for tokens/s
  int64_t prompt_tokens_computed_ = 0, generated_tokens_ = 0, steps_ = 0, finished_ = 0;
  StepTimes decode_steps_;
};

}  // namespace tessera::engine
