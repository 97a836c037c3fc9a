// The MLA KV cache sharded by token position over the ranks of a tensor-parallel group (issue 17,
// DESIGN.md "Many GPUs"). Plain tensor parallelism splits the heads, but MLA's cached latent serves
// every head, so each rank would store the whole cache: N copies. Sharded, each rank stores 1/N of
// every sequence's positions and the KV capacity grows with N.
//
// Where a position lives: an engine page of P x N positions (P = a rank's stored page) is split in
// N runs of P; run r is on rank r, in that rank's page of the same index. So every rank shares the
// engine's block tables, and position p of a sequence is on rank (p mod PN) / P at local position
// (p / PN) · P + p mod P of its pages. Local positions keep the order of positions, so the
// positions a token sees on a rank are a prefix of that rank's local positions.
//
// Attention on rank r (model/deepseek_v3.cpp): the new tokens' latents are written by their owner
// only; every rank absorbs its heads' queries, the absorbed queries of all heads are all-gathered,
// each rank attends over its own positions for all heads (Ops::mla_attend_latent: a partial output
// and its log-sum-exp), the partials are weighed by their share of each softmax (mla_rank_weigh)
// and summed by a reduce-scatter into each rank's own heads, which it up-projects. Prefill tokens take the
// same absorbed path as decode tokens (the decompressed prefill kernel needs every position's
// latent on one rank).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "ops/ops.h"

namespace tessera::model {

// Rank holding position `pos` of a sequence, for stored pages of `page` positions over `shard.size` ranks.
int shard_owner(int64_t pos, int64_t page, int size);
// Where position `pos` sits among its owner's local positions.
int64_t shard_local_position(int64_t pos, int64_t page, int size);
// How many of positions [0, n) `shard.rank` holds.
int64_t shard_positions_held(int64_t n, int64_t page, KvShard shard);

// What one rank does with a step's sequences (AttentionSeq, over engine pages of page x size
// positions). The block-table spans point into the step's sequences, which must outlive this.
struct ShardedStep {
  // The cache writes of the step's rows (Ops::mla_prepare / kv_cache_write), in row order: runs of
  // rows this rank stores at their local positions, and runs it does not store, with an empty block
  // table.
  std::vector<ops::AttentionSeq> writes;
  std::vector<ops::AttentionSeq> attends;  // one per row of the step: the local positions it sees
                                           // (mla_attend_latent; start_pos -1 when none)
  bool decode_step = true;                 // every sequence has one new token
};
ShardedStep shard_step(std::span<const ops::AttentionSeq> seqs, int64_t page, KvShard shard);

}  // namespace tessera::model
