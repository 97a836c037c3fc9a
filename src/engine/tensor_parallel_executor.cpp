#include "engine/tensor_parallel_executor.h"

#include <atomic>
#include <exception>
#include <thread>

#include "core/error.h"
#include "ops/backend.h"

namespace tessera::engine {

TensorParallelExecutor::TensorParallelExecutor(model::LoadedRanks& ranks, int64_t num_pages, model::RankKvLayout layout)
    : ranks_(ranks) {
  TESSERA_CHECK(!ranks_.ranks.empty(), "tensor-parallel executor: no ranks");
  for (int r = 0; r < static_cast<int>(ranks_.ranks.size()); ++r)
    caches_.push_back(ranks_.make_kv_cache(r, num_pages, layout));
  ops::bind_to_this_thread(ranks_.ranks.front()->ops());  // rank 0 runs (and samples) on this thread
}

core::Tensor TensorParallelExecutor::execute(const model::StepBatch& batch) {
  const int size = static_cast<int>(ranks_.ranks.size());
  std::vector<core::Tensor> logits(static_cast<size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::atomic<int> first_failed{-1};
  auto run = [&](int r) {
    try {
      ops::bind_to_this_thread(ranks_.ranks[static_cast<size_t>(r)]->ops());  // a rank on a GPU of its own
      logits[static_cast<size_t>(r)] =
          ranks_.ranks[static_cast<size_t>(r)]->forward(batch, caches_[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      int none = -1;
      // The first failure is the cause; the others are ranks released from a collective by abort().
      if (first_failed.compare_exchange_strong(none, r))
        ranks_.group->abort(fmt::format("rank {} failed: {}", r, e.what()));
    }
  };
  std::vector<std::thread> others;
  for (int r = 1; r < size; ++r) others.emplace_back(run, r);
  run(0);
  for (auto& t : others) t.join();
  if (first_failed >= 0) std::rethrow_exception(errors[static_cast<size_t>(first_failed.load())]);
  return logits.front();
}

}  // namespace tessera::engine
