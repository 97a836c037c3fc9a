// A small persistent thread pool for data-parallel loops on the CPU backend.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::core {

// Number of worker threads used by parallel_for (defaults to the hardware concurrency; the
// TESSERA_NUM_THREADS environment variable overrides it).
int num_threads();

// Calls fn(begin, end) over disjoint chunks covering [0, n), on the pool's threads and the caller's.
// Blocks until all chunks are done. `grain` is the smallest chunk worth a thread.
// Exceptions thrown by fn are rethrown in the caller (the first one wins).
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

}  // namespace tessera::core
