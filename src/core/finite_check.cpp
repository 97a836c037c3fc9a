#include "core/finite_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tessera::core {

namespace {

// Elements per block of the branch-free pass: small enough that a hit is found again cheaply,
// large enough that the per-block test costs nothing.
constexpr uint64_t kBlock = 4096;

// A value is non-finite when every exponent bit is set: (bits & exp) + lowest_exp_bit then carries
// into the top bit, which the OR of a whole block keeps. `T` is the unsigned type of the encoding.
template <class T>
bool block_has_bad(const T* p, uint64_t n, T exp_mask, T exp_lsb, T top_bit) {
  T acc = 0;
  for (uint64_t i = 0; i < n; ++i) acc |= static_cast<T>((p[i] & exp_mask) + exp_lsb);
  return (acc & top_bit) != 0;
}

template <class T>
int64_t first_bad(const void* data, uint64_t n, T exp_mask, T exp_lsb, T top_bit) {
  const T* p = static_cast<const T*>(data);
  for (uint64_t b = 0; b < n; b += kBlock) {
    const uint64_t len = std::min(kBlock, n - b);
    if (!block_has_bad(p + b, len, exp_mask, exp_lsb, top_bit)) continue;
    for (uint64_t i = 0; i < len; ++i)
      if (static_cast<T>((p[b + i] & exp_mask) + exp_lsb) & top_bit) return static_cast<int64_t>(b + i);
  }
  return -1;
}

}  // namespace

bool dtype_can_be_non_finite(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

int64_t first_non_finite(DType dtype, const void* data, uint64_t n) {
  switch (dtype) {
    case DType::kBF16:
      return first_bad<uint16_t>(data, n, 0x7f80, 0x0080, 0x8000);
    case DType::kF16:
      return first_bad<uint16_t>(data, n, 0x7c00, 0x0400, 0x8000);
    case DType::kF32:
      return first_bad<uint32_t>(data, n, 0x7f800000u, 0x00800000u, 0x80000000u);
    case DType::kF64:
      return first_bad<uint64_t>(data, n, 0x7ff0000000000000ull, 0x0010000000000000ull, 0x8000000000000000ull);
    // e4m3fn: only S.1111.111 is NaN, so the "exponent" here is all seven magnitude bits.
    case DType::kF8E4M3:
      return first_bad<uint8_t>(data, n, 0x7f, 0x01, 0x80);
    case DType::kF8E5M2:
      return first_bad<uint8_t>(data, n, 0x7c, 0x04, 0x80);
    default:
      return -1;
  }
}

std::string describe_non_finite(DType dtype, const void* element) {
  uint64_t bits = 0;
  const size_t size = dtype_size(dtype);
  std::memcpy(&bits, element, std::min<size_t>(size, sizeof(bits)));  // little-endian hosts
  const uint64_t mantissa_mask = [&]() -> uint64_t {
    switch (dtype) {
      case DType::kBF16:
        return 0x007f;
      case DType::kF16:
        return 0x03ff;
      case DType::kF32:
        return 0x007fffff;
      case DType::kF64:
        return 0x000fffffffffffffull;
      case DType::kF8E5M2:
        return 0x03;
      default:
        return ~uint64_t{0};  // e4m3fn: NaN only
    }
  }();
  const bool negative = (bits >> (8 * size - 1)) & 1;
  const char* what = (bits & mantissa_mask) != 0 ? "NaN" : (negative ? "-inf" : "+inf");
  return fmt::format("{} (bits 0x{:0{}x})", what, bits, 2 * size);
}

}  // namespace tessera::core
