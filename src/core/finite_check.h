// Finding NaN and infinity in raw tensor bytes: how the loader refuses a corrupt checkpoint's
// weights and scales (docs/ARCHITECTURE.md "Hostile input"). The scan is one branch-free pass that
// compilers vectorise; only a block that holds a bad value is scanned again for its index.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tessera::core {

// Whether `dtype` has encodings that are not finite numbers: the IEEE floats (NaN, ±inf), bf16,
// fp16, fp8 e5m2, and fp8 e4m3fn (NaN is 0x7f / 0xff; it has no infinities). Integers, bool and
// packed e2m1 (U8) have none, and e8m0 is not checked.
bool dtype_can_be_non_finite(DType dtype);

// The index of the first of the `n` elements of `dtype` at `data` that is NaN or infinite, or -1
// when all are finite (always -1 for a dtype without such encodings).
int64_t first_non_finite(DType dtype, const void* data, uint64_t n);

// "NaN" / "+inf" / "-inf", with the element's bits in hex: for messages.
std::string describe_non_finite(DType dtype, const void* element);

}  // namespace tessera::core
