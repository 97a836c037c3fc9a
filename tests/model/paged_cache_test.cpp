// The paged latent cache and mixed batches: prefill + decode through the cache must give the logits
// of one full prefill, and sequences batched together the logits each gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "model/golden_util.h"
#include "model/sequence_runner.h"
#include "support/engine_run.h"
#include "support/model_fixture.h"
#include "support/test_support.h"

namespace tessera {
namespace {

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

using PagedCacheTest = test::Dsv3TinySuite;

TEST_F(PagedCacheTest, PrefillThenDecodesEqualsFullPrefill) {
  auto& m = *model_;
  const int64_t V = m.config.vocab_size, total = 80;
  const auto ids = random_ids(total, V, 11);
  const auto full = model::prompt_logits(m, ids);
  for (int64_t k : {1, 17, 64, 65}) {
    SCOPED_TRACE("prefill k = " + std::to_string(k));
    model::SequenceRunner runner(m, total);
    std::vector<float> got = runner.append(std::vector<int32_t>(ids.begin(), ids.begin() + k), true);
    for (int64_t t = k; t < total; ++t) {
      auto step = runner.append({ids[static_cast<size_t>(t)]}, false);
      got.insert(got.end(), step.begin(), step.end());
    }
    ASSERT_EQ(got.size(), full.size());
    EXPECT_LE(test::rel_rms(got, full), 1e-5);
    // Also the decode positions alone (they are the ones that used the absorbed path).
    std::vector<float> got_dec(got.begin() + k * V, got.end()), full_dec(full.begin() + k * V, full.end());
    if (!got_dec.empty()) {
      EXPECT_LE(test::rel_rms(got_dec, full_dec), 1e-5);
    }
  }
}

TEST_F(PagedCacheTest, BatchOfMixedSequencesEqualsEachAlone) {
  auto& m = *model_;
  const int64_t V = m.config.vocab_size;
  // Sequences with different cached prefixes and new-token counts, stored in scattered pages.
  struct Case {
    int64_t cached, fresh;
  };
  const std::vector<Case> cases = {{0, 5}, {70, 1}, {3, 64}, {0, 1}, {130, 7}, {64, 1}};
  int64_t pages_needed = 0;
  for (const auto& c : cases) pages_needed += model::pages_for_tokens(c.cached + c.fresh);
  model::KvCache cache = m.make_kv_cache(pages_needed + 3);
  std::vector<int32_t> free_pages(static_cast<size_t>(cache.num_pages()));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), std::mt19937_64(5));

  model::StepBatch batch;
  std::vector<std::vector<float>> expected;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto ids = random_ids(c.cached + c.fresh, V, 100 + i);
    model::SequenceStep s;
    for (int64_t p = 0; p < model::pages_for_tokens(c.cached + c.fresh); ++p) {
      s.block_table.push_back(free_pages.back());
      free_pages.pop_back();
    }
    // Fill the cached prefix through its own step, in this sequence's pages.
    if (c.cached > 0) {
      model::StepBatch prefix;
      prefix.token_ids.assign(ids.begin(), ids.begin() + c.cached);
      prefix.seqs.push_back({0, c.cached, s.block_table, false});
      (void)m.model->forward(prefix, cache);
    }
    s.start_pos = c.cached;
    s.num_tokens = c.fresh;
    s.all_logits = i % 2 == 0;
    batch.token_ids.insert(batch.token_ids.end(), ids.begin() + c.cached, ids.end());
    batch.seqs.push_back(s);
    // Reference: this sequence alone, through a fresh runner.
    model::SequenceRunner alone(m, c.cached + c.fresh);
    if (c.cached > 0) (void)alone.append(std::vector<int32_t>(ids.begin(), ids.begin() + c.cached), false);
    expected.push_back(alone.append(std::vector<int32_t>(ids.begin() + c.cached, ids.end()), s.all_logits));
  }
  const auto logits = m.model->ops().to_host_f32(m.model->forward(batch, cache));
  ASSERT_EQ(static_cast<int64_t>(logits.size()), batch.num_logits_rows() * V);
  size_t offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    std::vector<float> got(logits.begin() + offset, logits.begin() + offset + expected[i].size());
    offset += expected[i].size();
    EXPECT_LE(test::rel_rms(got, expected[i]), 1e-5);
  }
}

TEST_F(PagedCacheTest, ChunkedPrefillGenerationEqualsOneStep) {
  auto& m = *model_;
  const auto prompt = random_ids(150, m.config.vocab_size, 3);
  // The engine's step budget chunks the prefill (64 + 64 + 22 tokens), as `tessera generate
  // --prefill-chunk 64` does.
  engine::EngineConfig chunked;
  chunked.max_num_batched_tokens = 64;
  const auto one = test::run_engine(m, test::greedy_request(prompt, 8));
  ASSERT_EQ(one.tokens.size(), 8u);
  EXPECT_EQ(test::run_engine(m, test::greedy_request(prompt, 8), chunked).tokens, one.tokens);
}

TEST_F(PagedCacheTest, BadStepsAreRefusedWithClearErrors) {
  auto& m = *model_;
  model::KvCache cache = m.make_kv_cache(2);
  model::StepBatch b;
  b.token_ids = {1, 2, 3};
  b.seqs.push_back({0, 3, {}, false});  // no pages for 3 tokens
  try {
    (void)m.model->forward(b, cache);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("block table"), std::string::npos) << e.what();
  }
  b.seqs[0].block_table = {0};
  b.token_ids = {1, 2, 5000};  // out of the vocabulary
  try {
    (void)m.model->forward(b, cache);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("5000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
