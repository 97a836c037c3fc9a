#include "model/kv_shard.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::model {

int shard_owner(int64_t pos, int64_t page, int size) { return static_cast<int>(pos % (page * size) / page); }

int64_t shard_local_position(int64_t pos, int64_t page, int size) { return pos / (page * size) * page + pos % page; }

int64_t shard_positions_held(int64_t n, int64_t page, KvShard shard) {
  const int64_t span = page * shard.size;
  return n / span * page + std::clamp<int64_t>(n % span - shard.rank * page, 0, page);
}

ShardedStep shard_step(std::span<const ops::AttentionSeq> seqs, int64_t page, KvShard shard) {
  TESSERA_CHECK(page > 0 && shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size,
                "KV shard {} of {} with pages of {} positions", shard.rank, shard.size, page);
  ShardedStep st;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ops::AttentionSeq& s = seqs[i];
    if (s.num_tokens != 1) st.decode_step = false;
    for (int64_t k = 0; k < s.num_tokens; ++k) {
      const int64_t row = s.token_begin + k, pos = s.start_pos + k;
      st.attends.push_back({row, 1, shard_positions_held(pos + 1, page, shard) - 1, s.block_table});
      const bool held = shard_owner(pos, page, shard.size) == shard.rank;
      const int64_t local = held ? shard_local_position(pos, page, shard.size) : 0;
      // A row continues the last write when it is of the same sequence, held or not as it, and
      // (held) at the next local position.
      ops::AttentionSeq* last = k > 0 ? &st.writes.back() : nullptr;
      if (last && !held && last->block_table.empty()) {
        ++last->num_tokens;
      } else if (last && held && !last->block_table.empty() && last->start_pos + last->num_tokens == local) {
        ++last->num_tokens;
      } else {
        st.writes.push_back({row, 1, local, held ? s.block_table : std::span<const int32_t>{}});
      }
    }
  }
  return st;
}

}  // namespace tessera::model
