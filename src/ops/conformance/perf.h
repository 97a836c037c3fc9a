// Perf mode of the conformance table (op_cases.h): the same cases the backend tests check, timed.
// `tessera bench kernels --cases` prints these next to the ceilings measured in the same run.
#pragma once

#include <functional>

#include "ops/conformance/op_cases.h"

namespace tessera::ops::conformance {

inline constexpr int kRepeats = 5;

struct CaseTiming {
  double seconds = 0;           // per call: the median round's time / iterations
  double bytes = 0, flops = 0;  // as the case declares them (BoundCase), 0 = not declared
  double device_seconds = 0;    // per call, on the device's clock (DeviceClock); 0 = not measured
};

// Runs `calls` and returns how long the device was busy with them, in seconds (CUDA: the union of
// their kernels' intervals, tools/kernel_trace.h).
using DeviceClock = std::function<double(const std::function<void()>& calls)>;

// Sets `c` up on `target`, runs it once untimed (first-use costs: module load, handles, caches), then
// times kRepeats rounds of `iterations` calls back to back, each round ended by `sync` (which waits
// for the backend's work), on the host clock; returns the median round's time per call. Back to
// back, a device backend's launch latency overlaps the previous call, as in a model step: one sync
// per call would add it (and the sync's own round trip) to every call.
// With `device_clock`, one more round of `iterations` calls is timed on the device's clock too: the
// time the kernels themselves took, without the host's launch costs, which a host loop of short
// kernels measures instead (a decode step, a replayed graph, does not pay them).
CaseTiming time_case(const OpCase& c, const Target& target, int iterations, const std::function<void()>& sync,
                     const DeviceClock& device_clock = {});

}  // namespace tessera::ops::conformance
