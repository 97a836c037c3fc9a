// The device clock that bounded waits measure themselves by: a wait for another block or warp
// (an mbarrier phase, a counter, a peer's flag) gives up after a limit instead of hanging the
// device when a protocol is broken.
#pragma once

#include <cstdint>

namespace tessera::ops::cuda {

constexpr uint64_t kWaitLimitNs = 10'000'000'000ull;  // 10 s: far beyond any wait a kernel expects

// Nanoseconds of the GPU's global timer.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace tessera::ops::cuda
