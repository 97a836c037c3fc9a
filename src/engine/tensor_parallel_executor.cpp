#include "engine/tensor_parallel_executor.h"

#include <atomic>
#include <exception>
#include <string>

#include "core/error.h"
#include "ops/backend.h"

namespace tessera::engine {

TensorParallelExecutor::TensorParallelExecutor(model::LoadedRanks& ranks, int64_t num_pages, model::RankKvLayout layout)
    : ranks_(ranks) {
  TESSERA_CHECK(!ranks_.ranks.empty(), "tensor-parallel executor: no ranks");
  for (int r = 0; r < static_cast<int>(ranks_.ranks.size()); ++r)
    caches_.push_back(ranks_.make_kv_cache(r, num_pages, layout));
  ops::bind_to_this_thread(ranks_.ranks.front()->ops());  // rank 0 runs (and samples) on this thread
  for (int r = 1; r < static_cast<int>(ranks_.ranks.size()); ++r) workers_.emplace_back([this, r] { worker(r); });
}

TensorParallelExecutor::~TensorParallelExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void TensorParallelExecutor::worker(int r) {
  ops::bind_to_this_thread(ranks_.ranks[static_cast<size_t>(r)]->ops());  // a rank on a GPU of its own
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(r);  // does not throw: it keeps the rank's error
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) finished_.notify_one();
    }
  }
}

core::Tensor TensorParallelExecutor::execute(const model::StepBatch& batch) {
  const int size = static_cast<int>(ranks_.ranks.size());
  std::vector<core::Tensor> logits(static_cast<size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::atomic<int> first_failed{-1};
  const std::function<void(int)> run = [&](int r) {
    try {
      logits[static_cast<size_t>(r)] =
          ranks_.ranks[static_cast<size_t>(r)]->forward(batch, caches_[static_cast<size_t>(r)]);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      int none = -1;
      // The first failure is the cause; the others are ranks released from a collective by abort().
      if (first_failed.compare_exchange_strong(none, r)) {
        std::string what = "an unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        ranks_.group->abort(fmt::format("rank {} failed: {}", r, what));
      }
    }
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &run;
    running_ = size - 1;
    ++generation_;
  }
  wake_.notify_all();
  ops::bind_to_this_thread(ranks_.ranks.front()->ops());
  run(0);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return running_ == 0; });
  }
  if (first_failed >= 0) std::rethrow_exception(errors[static_cast<size_t>(first_failed.load())]);
  return logits.front();
}

}  // namespace tessera::engine
