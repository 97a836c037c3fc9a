// A thread-safe multi-producer queue that a consumer drains; closing it wakes the consumer once
// everything pushed before was taken. The engine pushes request outputs, the HTTP thread pops them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace tessera::engine {

template <class T>
class Channel {
 public:
  void push(T value) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(value));
    }
    cv_.notify_all();
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until an item arrives; nullopt once closed and empty.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !items_.empty() || closed_; });
    return take_locked();
  }
  // Waits at most `timeout`; nullopt when nothing arrived (check closed()).
  template <class Rep, class Period>
  std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty() || closed_; });
    return take_locked();
  }
  std::optional<T> try_pop() {
    std::lock_guard<std::mutex> lock(mutex_);
    return take_locked();
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_ && items_.empty();
  }

 private:
  std::optional<T> take_locked() {
    std::optional<T> v;
    if (items_.empty()) return v;
    v.emplace(std::move(items_.front()));
    items_.pop_front();
    return v;
  }
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace tessera::engine
