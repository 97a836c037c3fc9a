// Scheduler policy without a model: fabricated sequences are planned, "computed" by marking their chunks done (and,
// where a chunk reaches the end of its sequence, appending a made-up token as the engine's sampler would), and every
// plan is compared with one worked out by hand from the policy stated in scheduler.h: decodes first, then prefill
// chunks, then waiting sequences, first-come-first-served within the token budget; preempt the newest running
// sequence when pages run out; siblings wait for the first sample's prompt; new sequences reuse cached full pages.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>

#include "engine/block_manager.h"
#include "engine/scheduler.h"

namespace tessera::engine {
namespace {

constexpr int64_t kPage = 4;  // tokens per KV page: small, so page boundaries are easy to count by hand

std::vector<int32_t> iota_tokens(int32_t first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A scheduler over its own block manager, with the engine's side of a step played by hand.
class Harness {
 public:
  Harness(int64_t pages, int64_t budget, bool prefix_cache = true, int64_t max_seqs = 256)
      : blocks(pages, kPage, prefix_cache), sched({budget, max_seqs}, blocks) {}

  Sequence* add(const std::string& name, uint64_t order, std::vector<int32_t> prompt, Sequence* wait_for = nullptr) {
    auto owned = std::make_unique<Sequence>(nullptr, 0, order, std::move(prompt), 0);
    Sequence* seq = owned.get();
    seq->wait_for = wait_for;
    names_[seq] = name;
    seqs_.push_back(std::move(owned));
    sched.add(seq);
    return seq;
  }

  // Plans one step and runs it; the plan comes back as "name:tokens ..." in plan order.
  // `prefill_cap`: as the engine's pacer passes it.
  std::string step(const Scheduler::PrefillCap& prefill_cap = {}) {
    const std::vector<ScheduledChunk> plan = sched.schedule(prefill_cap);
    std::string text;
    for (const auto& c : plan)
      text += (text.empty() ? "" : " ") + names_.at(c.seq) + ":" + std::to_string(c.num_tokens);
    for (const auto& c : plan) {
      sched.on_computed(c);
      // A chunk that reaches the end predicts the next token. Fabricated ids sit far from every prompt's, so a
      // generated token never makes a prefix match by accident.
      if (c.seq->num_pending() == 0) c.seq->tokens.push_back(next_token_++);
    }
    return text;
  }

  void finish(Sequence* seq) {
    seq->status = SeqStatus::kFinished;
    sched.remove(seq);
  }
  void finish_all() {
    for (auto& s : seqs_)
      if (s->status != SeqStatus::kFinished) finish(s.get());
  }

  BlockManager blocks;
  Scheduler sched;

 private:
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::map<const Sequence*, std::string> names_;
  int32_t next_token_ = 100000;
};

TEST(Scheduler, DecodesGoBeforePrefillChunksWhichGetWhatIsLeftOfTheBudget) {
  Harness h(/*pages=*/64, /*budget=*/8);
  h.add("A", 1, iota_tokens(0, 2));
  h.add("B", 2, iota_tokens(100, 2));
  // Both prompts fit the budget (2 + 2 of 8) and each produces a token: A and B decode from now on.
  EXPECT_EQ(h.step(), "A:2 B:2");
  // P is older than A and B (order 0), as a preempted and requeued request is: it keeps its first-come rank.
  Sequence* p = h.add("P", 0, iota_tokens(200, 20));
  // The two decodes take 1 token each; P, admitted from the waiting list, gets the 8 - 2 = 6 left.
  EXPECT_EQ(h.step(), "A:1 B:1 P:6");
  // Now P runs and is the oldest running sequence, yet its prefill chunk still comes after the decodes, and still
  // gets only what they leave: 6 more (12 of 20), then 6 (18), then the last 2.
  EXPECT_EQ(h.step(), "A:1 B:1 P:6");
  EXPECT_EQ(p->num_computed, 12);
  EXPECT_EQ(h.step(), "A:1 B:1 P:6");
  EXPECT_EQ(h.step(), "A:1 B:1 P:2");
  // P's last chunk produced a token, so P decodes too, and decodes go oldest first.
  EXPECT_EQ(h.step(), "P:1 A:1 B:1");
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

TEST(Scheduler, LongPromptIsPrefilledInChunksOfTheBudget) {
  Harness h(/*pages=*/64, /*budget=*/8);
  Sequence* a = h.add("A", 0, iota_tokens(0, 20));
  Sequence* b = h.add("B", 1, iota_tokens(100, 6));
  // A's 20-token prompt takes the whole budget twice; B waits behind it (first come, first served).
  EXPECT_EQ(h.step(), "A:8");
  EXPECT_EQ(h.sched.num_waiting(), 1);
  EXPECT_EQ(a->block_table.size(), 2u);  // pages only for the tokens scheduled so far: 8 / 4
  EXPECT_EQ(a->tokens.size(), 20u);      // a chunk short of the end predicts nothing
  EXPECT_EQ(h.step(), "A:8");
  EXPECT_EQ(a->block_table.size(), 4u);
  // A's last 4 prompt tokens; the 4 left over start B's prompt.
  EXPECT_EQ(h.step(), "A:4 B:4");
  EXPECT_EQ(a->num_computed, 20);
  EXPECT_EQ(a->tokens.size(), 21u);  // the chunk that ended the prompt predicted a token
  EXPECT_EQ(b->block_table.size(), 1u);
  // A decodes; B, a running prefill now, gets its remaining 2 and then decodes as well.
  EXPECT_EQ(h.step(), "A:1 B:2");
  EXPECT_EQ(a->block_table.size(), 6u);  // 21 tokens need a sixth page
  EXPECT_EQ(h.step(), "A:1 B:1");
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

TEST(Scheduler, SequenceLimitHoldsBackNewSequences) {
  Harness h(/*pages=*/64, /*budget=*/64, /*prefix_cache=*/true, /*max_seqs=*/2);
  Sequence* a = h.add("A", 0, iota_tokens(0, 3));
  h.add("B", 1, iota_tokens(100, 3));
  h.add("C", 2, iota_tokens(200, 3));
  // Budget is plenty, but only two sequences may run at once.
  EXPECT_EQ(h.step(), "A:3 B:3");
  EXPECT_EQ(h.step(), "A:1 B:1");
  h.finish(a);
  // A's slot goes to C.
  EXPECT_EQ(h.step(), "B:1 C:3");
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

// Q, an older running prefill, needs a page when none is left. The newest running sequence, V, is preempted even
// though it was already planned (its decode): its pages are freed, and the token it held goes back to the budget.
// The prefix cache is off so that freed pages hold nothing reusable and the counts stay plain.
TEST(Scheduler, PagesRunningOutPreemptTheNewestSequenceAndRefundItsPlannedTokens) {
  Harness h(/*pages=*/5, /*budget=*/8, /*prefix_cache=*/false);
  Sequence* p = h.add("P", 0, iota_tokens(0, 2));
  Sequence* v = h.add("V", 2, iota_tokens(100, 4));
  EXPECT_EQ(h.step(), "P:2 V:4");  // one page each; both then decode
  Sequence* q = h.add("Q", 1, iota_tokens(200, 12));
  // Decodes: P (3 tokens, 1 page), V (5 tokens, a 2nd page). Q gets 8 - 2 = 6 tokens on 2 pages: all 5 pages used.
  EXPECT_EQ(h.step(), "P:1 V:1 Q:6");
  EXPECT_EQ(h.blocks.num_available(), 0);
  // Next step: P and V decode within their pages (4 and 6 tokens); Q's next 6 tokens (12 in all) need a 3rd page.
  // None is free, so V (order 2, the newest running) is preempted: its decode leaves the plan (budget back to
  // 8 - 1 = 7) and its 2 pages are freed. Q takes one of them and 6 tokens, leaving 1 token of budget. V, now the
  // oldest waiting sequence, is admitted again with that refunded token on the other freed page, restarting its
  // recompute from token 0. Without the refund the budget would be spent and V would not run this step.
  EXPECT_EQ(h.step(), "P:1 Q:6 V:1");
  EXPECT_EQ(h.sched.stats().preemptions, 1);
  EXPECT_EQ(v->num_computed, 1);    // the 5 tokens it had computed were dropped; 1 recomputed
  EXPECT_EQ(v->tokens.size(), 6u);  // prompt + its 2 generated tokens, all to be recomputed
  EXPECT_EQ(v->block_table.size(), 1u);
  EXPECT_EQ(q->block_table.size(), 3u);
  EXPECT_EQ(p->block_table.size(), 1u);    // older sequences keep their pages
  EXPECT_EQ(h.blocks.num_available(), 0);  // 1 (P) + 3 (Q) + 1 (V)
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

TEST(Scheduler, NewestSequenceThatNeedsAPagePreemptsItselfAndIsRecomputedLater) {
  Harness h(/*pages=*/3, /*budget=*/8, /*prefix_cache=*/false);
  Sequence* a = h.add("A", 0, iota_tokens(0, 4));
  Sequence* b = h.add("B", 1, iota_tokens(100, 4));
  EXPECT_EQ(h.step(), "A:4 B:4");  // one full page each
  // Each decode (5th token) needs a 2nd page, but only one is free. A, older, takes it; B is then the newest running
  // sequence and gives up its own page rather than take one from A. Waiting, B needs 2 pages to recompute its 5
  // tokens and only its own freed page is available, so it stays out.
  EXPECT_EQ(h.step(), "A:1");
  EXPECT_EQ(h.sched.stats().preemptions, 1);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(h.blocks.num_available(), 1);
  EXPECT_EQ(a->block_table.size(), 2u);
  EXPECT_EQ(h.step(), "A:1");  // A's 6th token fits its 2nd page; B still does not fit
  // Once A is done, B is recomputed: its 4 prompt tokens plus the one it had generated.
  h.finish(a);
  EXPECT_EQ(h.step(), "B:5");
  EXPECT_EQ(b->tokens.size(), 6u);
  EXPECT_EQ(h.step(), "B:1");
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

TEST(Scheduler, SiblingsWaitForTheFirstSamplesPromptAndShareItsFullPages) {
  Harness h(/*pages=*/64, /*budget=*/8);
  const auto prompt = iota_tokens(0, 10);  // pages: [0,4) [4,8) full, [8,10) partial
  Sequence* p = h.add("P", 0, prompt);
  Sequence* s1 = h.add("S1", 1, prompt, p);
  Sequence* s2 = h.add("S2", 2, prompt, p);
  EXPECT_EQ(h.step(), "P:8");
  // P's first two pages are cached now, but its prompt is not complete, so the siblings still wait; a later request,
  // N, is not held up by them and takes 2 of the 6 tokens P leaves.
  h.add("N", 3, iota_tokens(500, 2));
  EXPECT_EQ(h.step(), "P:2 N:2");
  // P has computed its prompt. Each sibling reuses P's two full pages (8 tokens) and computes only the last 2 prompt
  // tokens, on a page of its own: the partial page is never shared, and the last token is needed for logits anyway.
  EXPECT_EQ(h.step(), "P:1 N:1 S1:2 S2:2");
  for (Sequence* s : {s1, s2}) {
    ASSERT_EQ(s->block_table.size(), 3u);
    EXPECT_EQ(s->block_table[0], p->block_table[0]);
    EXPECT_EQ(s->block_table[1], p->block_table[1]);
    EXPECT_NE(s->block_table[2], p->block_table[2]);
    EXPECT_EQ(s->cached_prompt_tokens, 8);
  }
  EXPECT_NE(s1->block_table[2], s2->block_table[2]);
  EXPECT_EQ(h.blocks.ref_count(p->block_table[0]), 3);
  EXPECT_EQ(h.sched.stats().prefix_query_tokens, 10 + 2 + 10 + 10);
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 8 + 8);
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

TEST(Scheduler, PrefixCacheHitSchedulesOnlyTheRemainder) {
  Harness h(/*pages=*/16, /*budget=*/64);
  Sequence* a = h.add("A", 0, iota_tokens(0, 10));
  EXPECT_EQ(h.step(), "A:10");
  const std::vector<int32_t> a_pages = a->block_table;  // [0,4) and [4,8) full and registered, [8,10) partial
  h.finish(a);
  EXPECT_EQ(h.blocks.num_cached_idle(), 2);  // A's full pages stay cached after it is gone
  // B shares A's first 8 tokens and then differs: the two cached pages are hits, its 3rd page [8,12) is a miss, so
  // only 13 - 8 = 5 tokens are scheduled, on two new pages.
  Sequence* b = h.add("B", 1, concat(iota_tokens(0, 8), iota_tokens(900, 5)));
  EXPECT_EQ(h.step(), "B:5");
  ASSERT_EQ(b->block_table.size(), 4u);
  EXPECT_EQ(b->block_table[0], a_pages[0]);
  EXPECT_EQ(b->block_table[1], a_pages[1]);
  EXPECT_EQ(b->cached_prompt_tokens, 8);
  EXPECT_EQ(h.blocks.num_cached_idle(), 0);  // both hits are held again
  // C's prompt is exactly A's first two pages. At least its last token must be computed to get logits, so only the
  // first page can be a hit and the 4 tokens of the second are computed again, on a fresh page.
  Sequence* c = h.add("C", 2, iota_tokens(0, 8));
  EXPECT_EQ(h.step(), "B:1 C:4");
  ASSERT_EQ(c->block_table.size(), 2u);
  EXPECT_EQ(c->block_table[0], a_pages[0]);
  EXPECT_NE(c->block_table[1], a_pages[1]);
  EXPECT_EQ(c->cached_prompt_tokens, 4);
  EXPECT_EQ(h.blocks.ref_count(a_pages[0]), 2);  // B and C
  // A prompt that differs in its first token misses everything: every later page key chains from the first.
  h.add("D", 3, concat({1000}, iota_tokens(1, 9)));
  EXPECT_EQ(h.step(), "B:1 C:1 D:10");
  EXPECT_EQ(h.sched.stats().prefix_query_tokens, 10 + 13 + 8 + 10);
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 0 + 8 + 4 + 0);
  h.finish_all();
  EXPECT_EQ(h.blocks.leak_report(), "");
}

// The pacer's cap limits the prefill tokens beside decodes (here 3 with two decodes running), and
// only when there are decodes: a step of prompts alone takes the whole budget.
TEST(Scheduler, PrefillBesideDecodesIsCappedByThePacer) {
  Harness h(64, 32);
  h.add("a", 0, iota_tokens(100, 5));
  h.add("b", 1, iota_tokens(200, 5));
  std::vector<std::pair<int64_t, int64_t>> asked;  // (decodes, backlog)
  auto cap = [&](int64_t decodes, int64_t backlog) {
    asked.emplace_back(decodes, backlog);
    return int64_t{3};
  };
  EXPECT_EQ(h.step(cap), "a:5 b:5");  // no decodes: not capped, not asked
  EXPECT_TRUE(asked.empty());
  h.add("c", 2, iota_tokens(300, 8));
  h.add("d", 3, iota_tokens(400, 6));
  EXPECT_EQ(h.step(cap), "a:1 b:1 c:3");
  // The backlog: every prompt token not computed yet, running (none) and waiting (c's 8, d's 6).
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], std::make_pair(int64_t{2}, int64_t{14}));
  EXPECT_EQ(h.step(cap), "a:1 b:1 c:3");
  EXPECT_EQ(asked.back(), std::make_pair(int64_t{2}, int64_t{5 + 6}));  // c running with 5 left, d waiting
  EXPECT_EQ(h.step(), "a:1 b:1 c:2 d:6");                               // no cap: the rest of c's prompt, then d's
}

}  // namespace
}  // namespace tessera::engine
