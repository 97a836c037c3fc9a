// Plans each step: which sequences run and how many of their tokens, within a token budget
// (max_num_batched_tokens) and a sequence limit (max_num_seqs). Decodes first, then prefill
// chunks of running sequences, then new sequences, all first-come-first-served; the prefill tokens
// beside decodes may be capped further (the engine's StepPacer). New sequences
// reuse cached prefix pages. When pages run out, the newest running sequence is preempted: its
// pages are freed and it is recomputed later (prompt + the tokens it had generated).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace tessera::engine {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t num_tokens = 0;  // tokens [seq->num_computed, seq->num_computed + num_tokens)
  bool decode = false;     // a running sequence's one pending token (else a prefill chunk)
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens of first admissions
  int64_t prefix_hit_tokens = 0;    // of which came from the prefix cache
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  void add(Sequence* seq);
  // Drops a finished or aborted sequence and releases its pages.
  void remove(Sequence* seq);
  // `prefill_cap(decodes, backlog)`: how many prefill tokens a step with that many decode tokens may
  // add while `backlog` prompt tokens (of running and waiting sequences, before prefix-cache hits)
  // wait to be computed (-1: as many as the budget allows; StepPacer decides it in the engine).
  using PrefillCap = std::function<int64_t(int64_t decodes, int64_t backlog)>;
  std::vector<ScheduledChunk> schedule(const PrefillCap& prefill_cap = {});
  // After the forward: marks the chunk computed and registers pages that became full.
  void on_computed(const ScheduledChunk& chunk);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  const SchedulerStats& stats() const { return stats_; }

 private:
  // Prompt (and recompute) tokens of running and waiting sequences not computed yet.
  int64_t prefill_backlog() const;
  bool ensure_pages(Sequence* seq, int64_t tokens);
  void release_pages(Sequence* seq);
  void preempt(Sequence* seq);
  void match_prefix(Sequence* seq);
  static void insert_ordered(std::vector<Sequence*>& list, Sequence* seq);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::vector<Sequence*> waiting_;  // by order
  std::vector<Sequence*> running_;  // by order
  SchedulerStats stats_;
};

}  // namespace tessera::engine
