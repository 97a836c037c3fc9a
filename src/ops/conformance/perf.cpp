#include "ops/conformance/perf.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"

namespace tessera::ops::conformance {

CaseTiming time_case(const OpCase& c, const Target& target, int iterations, const std::function<void()>& sync,
                     const DeviceClock& device_clock) {
  TESSERA_CHECK(iterations >= 1, "--iterations {}: at least one timed call", iterations);
  BoundCase b = c.setup(target);
  b.run();
  sync();
  std::vector<double> per_call;
  for (int r = 0; r < kRepeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) b.run();
    sync();
    per_call.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iterations);
  }
  std::nth_element(per_call.begin(), per_call.begin() + kRepeats / 2, per_call.end());
  CaseTiming t{per_call[kRepeats / 2], b.bytes, b.flops};
  if (device_clock)
    t.device_seconds = device_clock([&] {
                         for (int i = 0; i < iterations; ++i) b.run();
                       }) /
                       iterations;
  return t;
}

}  // namespace tessera::ops::conformance
