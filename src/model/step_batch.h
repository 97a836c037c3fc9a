// One model step: new tokens of many sequences, flattened. Prefill chunks and decodes mix freely:
// each sequence says where its tokens start in the flat list, how many tokens it already has in
// the cache, and which cache pages hold its context.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::model {

struct SequenceStep {
  int64_t start_pos = 0;             // tokens of this sequence already in the KV cache
  int64_t num_tokens = 0;            // new tokens in this step (>= 1)
  std::vector<int32_t> block_table;  // page ids for positions [0, start_pos + num_tokens)
  bool all_logits = false;           // logits for every new token, or only for the last one
};

struct StepBatch {
  std::vector<int32_t> token_ids;  // concatenated new tokens, in sequence order
  std::vector<SequenceStep> seqs;

  // Number of logits rows forward() returns: all new tokens of all_logits sequences, one per
  // other sequence, in sequence order.
  int64_t num_logits_rows() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += s.all_logits ? s.num_tokens : 1;
    return n;
  }
};

}  // namespace tessera::model
