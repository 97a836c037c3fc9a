#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "model/kv_cache.h"

namespace tessera::engine {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  TESSERA_CHECK(config.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive");
  TESSERA_CHECK(config.max_num_seqs > 0, "max_num_seqs must be positive");
}

void Scheduler::insert_ordered(std::vector<Sequence*>& list, Sequence* seq) {
  auto it =
      std::lower_bound(list.begin(), list.end(), seq, [](Sequence* a, Sequence* b) { return a->order < b->order; });
  list.insert(it, seq);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  insert_ordered(waiting_, seq);
}

void Scheduler::remove(Sequence* seq) {
  std::erase(waiting_, seq);
  std::erase(running_, seq);
  release_pages(seq);
}

void Scheduler::release_pages(Sequence* seq) {
  for (int32_t p : seq->block_table) blocks_.release(p);
  seq->block_table.clear();
  seq->page_keys.clear();
  seq->num_computed = 0;
}

void Scheduler::preempt(Sequence* seq) {
  std::erase(running_, seq);
  release_pages(seq);
  add(seq);
  ++stats_.preemptions;
}

bool Scheduler::ensure_pages(Sequence* seq, int64_t tokens) {
  const auto need = static_cast<size_t>(model::pages_for_tokens(tokens, blocks_.page_size()));
  while (seq->block_table.size() < need) {
    auto page = blocks_.allocate();
    if (!page) return false;
    seq->block_table.push_back(*page);
  }
  return true;
}

void Scheduler::match_prefix(Sequence* seq) {
  const int64_t ps = blocks_.page_size();
  // At least one token must be computed to get logits, so the last token is never a hit.
  const int64_t max_pages = (static_cast<int64_t>(seq->tokens.size()) - 1) / ps;
  uint64_t parent = kRootPageHash;
  for (int64_t i = 0; i < max_pages; ++i) {
    std::span<const int32_t> toks(seq->tokens.data() + i * ps, static_cast<size_t>(ps));
    const uint64_t key = page_hash(parent, toks);
    auto page = blocks_.acquire_cached(key, parent, toks);
    if (!page) break;
    seq->block_table.push_back(*page);
    seq->page_keys.push_back(key);
    seq->num_computed += ps;
    parent = key;
  }
}

int64_t Scheduler::prefill_backlog() const {
  int64_t tokens = 0;
  for (const Sequence* seq : running_)
    if (seq->num_pending() > 1) tokens += seq->num_pending();
  for (const Sequence* seq : waiting_) tokens += seq->num_pending();
  return tokens;
}

std::vector<ScheduledChunk> Scheduler::schedule(const PrefillCap& prefill_cap) {
  std::vector<ScheduledChunk> plan;
  int64_t budget = config_.max_num_batched_tokens;
  // After the decodes: the prefill tokens this step may still take (the cap, within the budget).
  auto cap_prefill = [&] {
    const int64_t decodes = static_cast<int64_t>(plan.size());
    const int64_t cap = prefill_cap && decodes > 0 ? prefill_cap(decodes, prefill_backlog()) : -1;
    if (cap >= 0) budget = std::min(budget, cap);
  };
  auto planned = [&](Sequence* s) {
    return std::find_if(plan.begin(), plan.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
  };
  // Running sequences: decodes (one pending token) in the first pass, prefill chunks in the second.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) cap_prefill();
    const std::vector<Sequence*> snapshot = running_;
    for (Sequence* seq : snapshot) {
      if (budget == 0) break;
      if (seq->status != SeqStatus::kRunning || planned(seq) != plan.end()) continue;
      const bool decode = seq->num_pending() == 1;
      if (decode != (pass == 0)) continue;
      const int64_t k = std::min(seq->num_pending(), budget);
      bool self_preempted = false;
      while (!ensure_pages(seq, seq->num_computed + k)) {
        Sequence* victim = running_.back();  // the newest running sequence
        if (victim == seq) {
          preempt(seq);
          self_preempted = true;
          break;
        }
        if (auto it = planned(victim); it != plan.end()) {
          budget += it->num_tokens;
          plan.erase(it);
        }
        preempt(victim);
      }
      if (self_preempted) continue;
      plan.push_back({seq, k, decode});
      budget -= k;
    }
  }
  // New (or preempted) sequences, oldest first, while budget, sequence slots and pages last.
  for (size_t i = 0; i < waiting_.size() && budget > 0 && num_running() < config_.max_num_seqs;) {
    Sequence* seq = waiting_[i];
    if (seq->wait_for != nullptr && seq->wait_for->status != SeqStatus::kFinished &&
        seq->wait_for->num_computed < seq->wait_for->prompt_len) {
      ++i;  // its sibling's prompt pages are not in the cache yet; share them next step
      continue;
    }
    match_prefix(seq);
    const int64_t k = std::min(seq->num_pending(), budget);
    if (!ensure_pages(seq, seq->num_computed + k)) {
      release_pages(seq);  // never preempt a running sequence for a waiting one
      break;
    }
    if (seq->cached_prompt_tokens < 0) {  // first admission: what the prefix cache saved
      seq->cached_prompt_tokens = std::min(seq->num_computed, seq->prompt_len);
      stats_.prefix_query_tokens += seq->prompt_len;
      stats_.prefix_hit_tokens += seq->cached_prompt_tokens;
    }
    waiting_.erase(waiting_.begin() + static_cast<long>(i));
    seq->status = SeqStatus::kRunning;
    insert_ordered(running_, seq);
    plan.push_back({seq, k});
    budget -= k;
  }
  return plan;
}

void Scheduler::on_computed(const ScheduledChunk& c) {
  Sequence* seq = c.seq;
  seq->num_computed += c.num_tokens;
  const int64_t ps = blocks_.page_size();
  while (static_cast<int64_t>(seq->page_keys.size() + 1) * ps <= seq->num_computed) {
    const size_t i = seq->page_keys.size();
    const uint64_t parent = i == 0 ? kRootPageHash : seq->page_keys.back();
    std::span<const int32_t> toks(seq->tokens.data() + static_cast<int64_t>(i) * ps, static_cast<size_t>(ps));
    const uint64_t key = page_hash(parent, toks);
    blocks_.register_page(seq->block_table[i], key, parent, toks);
    seq->page_keys.push_back(key);
  }
}

}  // namespace tessera::engine
