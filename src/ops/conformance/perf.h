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
};

// Sets `c` up on `target`, runs it once untimed (first-use costs: module load, handles, caches), then
// times kRepeats rounds of `iterations` calls back to back, each round ended by `sync` (which waits
// for the backend's work), on the host clock; returns the median round's time per call. Back to
// back, a device backend's launch latency overlaps the previous call, as in a model step: one sync
// per call would add it (and the sync's own round trip) to every call.
CaseTiming time_case(const OpCase& c, const Target& target, int iterations, const std::function<void()>& sync);

}  // namespace tessera::ops::conformance
