// 2-D tensor maps for the Hopper TMA kernels (the MLA wgmma decode, the routed experts' ring):
// cuTensorMapEncodeTiled reached through the runtime's driver entry point, so nothing links
// against libcuda. A CUDA header (CUtensorMap): for the CUDA backend's sources only.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

// The replay check's view of a tensor map passed as a kernel argument (launch_gate.h): a map
// encoded into a zeroed object from an address and an extent, so equal bytes mean an equal map.
inline void add_fields(Signature& s, const CUtensorMap& map) { s.add_bytes(&map, sizeof map); }

// Encodes `map` over a row-major matrix of `rows` rows of `cols` elements of `type`, rows
// `row_stride_bytes` apart, copied in boxes of `box_rows` x `box_cols` elements with `swizzle`
// (elements past the matrix are zero-filled). False when the driver has no encoder or refuses the
// shape (TMA wants 16-byte aligned bases and strides).
bool encode_tensor_map_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, uint64_t cols, uint64_t rows,
                          uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, CUtensorMapSwizzle swizzle);

}  // namespace tessera::ops::cuda
