#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

using tessera::core::parallel_for;

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  }
}

TEST(ThreadPool, PropagatesExceptionsAndStaysUsable) {
  EXPECT_THROW(parallel_for(100,
                            [](int64_t b, int64_t) {
                              if (b == 0) throw std::runtime_error("boom");
                            }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, ManyBackToBackJobsEachCountedOnce) {
  // Regression: workers late from one job must not take or count chunks of the next.
  for (int job = 0; job < 20000; ++job) {
    std::atomic<int64_t> sum{0};
    parallel_for(64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 64 * 63 / 2) << "job " << job;
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  std::atomic<int64_t> count{0};
  parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(10, [&](int64_t b2, int64_t e2) { count += e2 - b2; });
  });
  EXPECT_EQ(count.load(), 80);
}
