// Runs one sequence through a model with its own small paged cache: prefill (optionally in
// chunks) then one-token decodes. Used by `tessera generate` / `tessera logits` and by tests; the
// engine (continuous batching over many sequences) is built on the same forward interface.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/model.h"

namespace tessera::model {

struct GenerateOptions {
  int64_t max_tokens = 16;
  float temperature = 0.0f;  // 0: greedy
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
  int64_t prefill_chunk = 0;      // 0: the whole prompt in one step
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  bool stopped = false;  // ended on a stop id rather than max_tokens
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

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

GenerateResult generate(LoadedModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);

}  // namespace tessera::model
