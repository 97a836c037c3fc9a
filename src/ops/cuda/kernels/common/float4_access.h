// Whether kernels may move floats 16 bytes at a time (float4): the one rule the elementwise, row
// gather, MoE combine and peer all-reduce launches use to choose their 16-byte instance.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace tessera::ops::cuda {

// n floats (a count, or a row width whose rows start at these bases) at every pointer of `ptrs`
// (null ones ignored): n a multiple of 4 and every pointer 16-byte aligned.
inline bool float4_access(int64_t n, std::initializer_list<const void*> ptrs) {
  uintptr_t bits = 0;
  for (const void* p : ptrs) bits |= reinterpret_cast<uintptr_t>(p);
  return n % 4 == 0 && bits % 16 == 0;
}

}  // namespace tessera::ops::cuda
