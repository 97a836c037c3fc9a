// Where the positions of a KV cache sharded over tensor-parallel ranks live (model/kv_shard.h),
// checked against a plain enumeration: each position on exactly one rank, a rank's positions at
// local positions 0, 1, 2, ... in order, and a step's writes and attention ranges on each rank.
#include "model/kv_shard.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera {
namespace {

TEST(KvShard, EveryPositionHasOneOwnerAndRanksKeepTheirPositionsInOrder) {
  for (int size : {1, 2, 3, 8})
    for (int64_t page : {1, 2, 64}) {
      std::vector<int64_t> next_local(static_cast<size_t>(size), 0);
      for (int64_t pos = 0; pos < 5 * page * size + 7; ++pos) {
        const int owner = model::shard_owner(pos, page, size);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, size);
        // Runs of `page` positions go to ranks 0, 1, ... in turn.
        EXPECT_EQ(owner, static_cast<int>((pos / page) % size)) << pos;
        EXPECT_EQ(model::shard_local_position(pos, page, size), next_local[static_cast<size_t>(owner)]++) << pos;
        for (int r = 0; r < size; ++r)
          EXPECT_EQ(model::shard_positions_held(pos + 1, page, {r, size}), next_local[static_cast<size_t>(r)])
              << "rank " << r << " of " << size << ", page " << page << ", positions [0, " << pos + 1 << ")";
      }
    }
}

TEST(KvShard, StepWritesHeldRowsAndEachTokenSeesItsRanksPrefix) {
  // Two sequences: 5 new tokens after 3 cached, and one decode token at position 9; pages of 2 over
  // 3 ranks (an engine page covers 6 positions).
  const std::vector<int32_t> t0 = {4, 7}, t1 = {1, 2};
  const std::vector<ops::AttentionSeq> seqs = {{0, 5, 3, t0}, {5, 1, 9, t1}};
  constexpr int64_t kPage = 2;
  constexpr int kRanks = 3;
  std::vector<int> writers_of_row(6, 0);
  for (int r = 0; r < kRanks; ++r) {
    const model::ShardedStep st = model::shard_step(seqs, kPage, {r, kRanks});
    EXPECT_FALSE(st.decode_step);
    ASSERT_EQ(st.attends.size(), 6u);
    const int64_t pos_of_row[6] = {3, 4, 5, 6, 7, 9};
    // The rows this rank stores, and where: positions 3..7 of sequence 0, 9 of sequence 1.
    std::vector<int64_t> want_rows, want_local;
    for (int64_t row = 0; row < 6; ++row)
      if (model::shard_owner(pos_of_row[row], kPage, kRanks) == r) {
        want_rows.push_back(row);
        want_local.push_back(model::shard_local_position(pos_of_row[row], kPage, kRanks));
        ++writers_of_row[static_cast<size_t>(row)];
      }
    // The writes cover every row in order; the rows another rank stores have no block table.
    std::vector<int64_t> got_rows, got_local;
    int64_t next_row = 0;
    for (const auto& w : st.writes) {
      EXPECT_EQ(w.token_begin, next_row) << "rank " << r;
      next_row += w.num_tokens;
      if (w.block_table.empty()) continue;
      EXPECT_EQ(w.block_table.data(), w.token_begin < 5 ? t0.data() : t1.data());
      EXPECT_LE(w.token_begin + w.num_tokens, w.token_begin < 5 ? 5 : 6) << "a write spans two sequences";
      for (int64_t k = 0; k < w.num_tokens; ++k) {
        got_rows.push_back(w.token_begin + k);
        got_local.push_back(w.start_pos + k);
      }
    }
    EXPECT_EQ(next_row, 6);
    EXPECT_EQ(got_rows, want_rows) << "rank " << r;
    EXPECT_EQ(got_local, want_local) << "rank " << r;
    for (int64_t row = 0; row < 6; ++row) {
      const auto& a = st.attends[static_cast<size_t>(row)];
      EXPECT_EQ(a.token_begin, row);
      EXPECT_EQ(a.num_tokens, 1);
      int64_t held = 0;  // this rank's positions among [0, pos] of the row's sequence
      for (int64_t p = 0; p <= pos_of_row[row]; ++p) held += model::shard_owner(p, kPage, kRanks) == r ? 1 : 0;
      EXPECT_EQ(a.start_pos, held - 1) << "rank " << r << ", row " << row;
    }
  }
  for (int w : writers_of_row) EXPECT_EQ(w, 1);  // every new latent stored exactly once
}

TEST(KvShard, ADecodeStepIsMarkedAsOne) {
  const std::vector<int32_t> t = {0};
  const std::vector<ops::AttentionSeq> seqs = {{0, 1, 0, t}, {1, 1, 1, t}};
  EXPECT_TRUE(model::shard_step(seqs, 64, {1, 2}).decode_step);
  // Rank 1 of 2 holds nothing of positions 0 and 1 (both in rank 0's first page): it sees nothing.
  for (const auto& a : model::shard_step(seqs, 64, {1, 2}).attends) EXPECT_EQ(a.start_pos, -1);
}

}  // namespace
}  // namespace tessera
