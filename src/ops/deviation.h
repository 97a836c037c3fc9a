// How far a backend's op output is from the CPU reference's, in the one measure the start-up
// self-check (ops/checking_ops.h) judges ops by.
//
// Per element, e = |got - want| / max(rms(want's row), |want|): an element counts relative to its
// own magnitude when it stands out of its row (the few huge channels of a real model's residual
// stream keep their bf16 precision), else relative to the row's RMS (an element near zero is not
// held to a relative precision its row never had). The maximum over the elements is what an op's
// tolerance bounds, so a kernel wrong in a single element (one tile edge, one token) fails as
// surely as one wrong everywhere, which a relative RMS over the tensor would dilute.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tessera::ops {

struct Deviation {
  double max_rel = 0;        // the largest e; infinite for a non-finite value where want is finite
  int64_t row = 0, col = 0;  // where, viewing the values as [rows, cols]
  float got = 0, want = 0;   // the values there
  // "max relative error 0.31 at [3, 117] (got 2.5, reference 1.9)"
  std::string describe() const;
};

// Compares got with want, both [rows, cols] row-major (cols > 0, same size). A non-finite want must
// be matched exactly (the same infinity, or NaN for NaN). Rows whose want is all zero count against
// a millionth of the tensor's RMS, so a device value where the reference has exact zeros shows.
Deviation deviation(std::span<const float> got, std::span<const float> want, int64_t cols);

}  // namespace tessera::ops
