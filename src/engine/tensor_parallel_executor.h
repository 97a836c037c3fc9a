// The multi-rank executor (DESIGN.md "Many GPUs"): one model shard, backend and KV cache per rank,
// every step run by all ranks in lockstep (rank 0 on the caller's thread, the others on threads of
// their own that live as long as the executor), meeting in the forward's collectives. Rank 0's logits are sampled:
// every rank ends a step with the same all-gathered logits, so sampling is identical to one rank.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
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
  ~TensorParallelExecutor() override;
  TensorParallelExecutor(const TensorParallelExecutor&) = delete;
  TensorParallelExecutor& operator=(const TensorParallelExecutor&) = delete;
  const io::ModelConfig& config() const override { return ranks_.config; }
  int64_t num_pages() const override { return caches_.front().num_pages(); }
  int64_t page_size() const override { return caches_.front().page_size(); }
  // A rank that fails stops the group: the step throws that rank's error, and so do later steps.
  core::Tensor execute(const model::StepBatch& batch) override;
  ops::Ops& sampling_ops() override { return ranks_.ranks.front()->ops(); }

 private:
  // Rank r's loop (r >= 1): runs each step's job for r, then counts itself done.
  void worker(int r);

  model::LoadedRanks& ranks_;
  std::vector<model::KvCache> caches_;
  // Ranks 1.. wait on `wake_` for a new step (generation_) rather than a thread being started for
  // each rank every step (tens of µs each, on every decode step).
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  uint64_t generation_ = 0;
  int running_ = 0;                                // workers still in the current step
  bool stopping_ = false;                          // the destructor: workers return
  const std::function<void(int)>* job_ = nullptr;  // the current step's work for rank r
  std::vector<std::thread> workers_;               // ranks 1..size-1
};

}  // namespace tessera::engine
