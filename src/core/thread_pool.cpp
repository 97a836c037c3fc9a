#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"

namespace tessera::core {

namespace {

// Each parallel_for is a Job with its own counters, so a worker still finishing one job can never
// take or count a chunk of the next (sharing counters across jobs let a late worker run a chunk
// twice and miscount completion, which could hang the caller).
struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, chunks = 0;
  std::atomic<int64_t> next{0};
  int64_t done = 0;  // guarded by Pool::mu_
  std::exception_ptr error;
};

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
    int64_t chunks = std::min<int64_t>(size() * 4, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
    // One job at a time; nested or concurrent parallel_for calls run inline.
    if (chunks <= 1 || workers_.empty() || in_job_.exchange(true)) {
      fn(0, n);
      return;
    }
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    job->chunks = chunks;
    {
      std::lock_guard lock(mu_);
      job_ = job;
      ++generation_;
    }
    cv_.notify_all();
    drain(*job);
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return job->done == job->chunks; });
    job_.reset();
    lock.unlock();
    in_job_ = false;
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void drain(Job& job) {
    for (;;) {
      const int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) return;
      const int64_t b = job.n * c / job.chunks, e = job.n * (c + 1) / job.chunks;
      std::exception_ptr err;
      try {
        if (b < e) (*job.fn)(b, e);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard lock(mu_);
      if (err && !job.error) job.error = err;
      if (++job.done == job.chunks) done_cv_.notify_all();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      drain(*job);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  std::shared_ptr<Job> job_;
  std::atomic<bool> in_job_{false};
};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static int n = [] {
    if (const auto env = env_value("TESSERA_NUM_THREADS")) {
      int v = std::atoi(env->c_str());
      if (v > 0) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  pool().run(n, fn, grain);
}

}  // namespace tessera::core
