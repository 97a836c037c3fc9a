// Runs one sequence through a model with its own small paged cache and returns raw logits: prefill
// (optionally in chunks) then one-token appends. Used by `tessera logits` and by tests that compare
// logits; generation (`tessera generate`, the server) goes through the engine, whose sampler is the
// only one, so that a seed means the same tokens everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace tessera::model {

class SequenceRunner {
 public:
  // `capacity` is the most tokens the sequence will hold (prompt + generated).
  SequenceRunner(LoadedModel& model, int64_t capacity);
  // Appends `ids` to the sequence in one step; returns host logits for every new token
  // ([ids.size(), vocab]) or only the last one.
  std::vector<float> append(const std::vector<int32_t>& ids, bool all_logits);
  int64_t length() const { return length_; }

 private:
  LoadedModel& model_;
  KvCache cache_;
  std::vector<int32_t> block_table_;
  int64_t length_ = 0;
};

// Prompt logits [prompt.size(), vocab] from one full prefill.
std::vector<float> prompt_logits(LoadedModel& model, const std::vector<int32_t>& prompt);

}  // namespace tessera::model
