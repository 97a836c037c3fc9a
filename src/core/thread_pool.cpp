#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::core {

namespace {

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
    if (chunks <= 1 || workers_.empty()) {
      fn(0, n);
      return;
    }
    // One job at a time; nested parallel_for calls run inline.
    if (in_job_.exchange(true)) {
      fn(0, n);
      return;
    }
    std::unique_lock lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    next_ = 0;
    done_ = 0;
    error_ = nullptr;
    ++generation_;
    lock.unlock();
    cv_.notify_all();
    drain();
    lock.lock();
    done_cv_.wait(lock, [&] { return done_ == chunks_; });
    fn_ = nullptr;
    auto err = error_;
    lock.unlock();
    in_job_ = false;
    if (err) std::rethrow_exception(err);
  }

 private:
  void drain() {
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      int64_t b = n_ * c / chunks_, e = n_ * (c + 1) / chunks_;
      try {
        if (b < e) (*fn_)(b, e);
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard lock(mu_);
      if (++done_ == chunks_) done_cv_.notify_all();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (generation_ != seen && fn_ != nullptr); });
      if (stop_) return;
      seen = generation_;
      lock.unlock();
      drain();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t done_ = 0;
  std::exception_ptr error_;
  std::atomic<bool> in_job_{false};
};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static int n = [] {
    if (const char* env = std::getenv("TESSERA_NUM_THREADS")) {
      int v = std::atoi(env);
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
