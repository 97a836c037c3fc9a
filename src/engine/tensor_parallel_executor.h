// The multi-rank executor (DESIGN.md "Many GPUs"): one model shard, backend and KV cache per rank,
// every step run by all ranks in lockstep (rank 0 on the caller's thread, the others on threads of
// their own), meeting in the forward's collectives. Rank 0's logits are sampled: every rank ends a
// step with the same all-gathered logits, so sampling is identical to one rank.
#pragma once

#include <vector>

#include "engine/executor.h"
#include "model/tensor_parallel.h"

namespace tessera::engine {

class TensorParallelExecutor final : public Executor {
 public:
  // `ranks` must outlive the executor; each rank gets a KV cache of num_pages pages (sharded by
  // position unless `layout` says otherwise: then a page covers layout.stored_page_size x ranks
  // positions, and the engine's page_size() is that).
  TensorParallelExecutor(model::LoadedRanks& ranks, int64_t num_pages, model::RankKvLayout layout = {});
  const io::ModelConfig& config() const override { return ranks_.config; }
  int64_t num_pages() const override { return caches_.front().num_pages(); }
  int64_t page_size() const override { return caches_.front().page_size(); }
  // A rank that fails stops the group: the step throws that rank's error, and so do later steps.
  core::Tensor execute(const model::StepBatch& batch) override;
  ops::Ops& sampling_ops() override { return ranks_.ranks.front()->ops(); }

 private:
  model::LoadedRanks& ranks_;
  std::vector<model::KvCache> caches_;
};

}  // namespace tessera::engine
