#include "model/sequence_runner.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace tessera::model {

SequenceRunner::SequenceRunner(LoadedModel& model, int64_t capacity)
    : model_(model), cache_(model.make_kv_cache(std::max<int64_t>(1, pages_for_tokens(capacity)))) {
  block_table_.resize(static_cast<size_t>(cache_.num_pages()));
  std::iota(block_table_.begin(), block_table_.end(), 0);
}

std::vector<float> SequenceRunner::append(const std::vector<int32_t>& ids, bool all_logits) {
  TESSERA_CHECK(!ids.empty(), "append: no tokens");
  const int64_t need = length_ + static_cast<int64_t>(ids.size());
  TESSERA_CHECK(need <= cache_.num_pages() * cache_.page_size(), "sequence of {} tokens exceeds its cache of {}", need,
                cache_.num_pages() * cache_.page_size());
  StepBatch batch;
  batch.token_ids = ids;
  SequenceStep s;
  s.start_pos = length_;
  s.num_tokens = static_cast<int64_t>(ids.size());
  s.block_table.assign(block_table_.begin(), block_table_.begin() + pages_for_tokens(need, cache_.page_size()));
  s.all_logits = all_logits;
  batch.seqs.push_back(std::move(s));
  core::Tensor logits = model_.model->forward(batch, cache_);
  length_ = need;
  return model_.model->ops().to_host_f32(logits);
}

std::vector<float> prompt_logits(LoadedModel& model, const std::vector<int32_t>& prompt) {
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()));
  return runner.append(prompt, /*all_logits=*/true);
}

}  // namespace tessera::model
