// The tensor maps the ring kernels (grouped_ring.cu, linear_ring.cu) stream a quantized matrix
// through: its codes and its scales as rows of bytes, in the boxes of the kernels' ring stages
// (ring_layout.h). A CUDA header (CUtensorMap): for the CUDA backend's sources only.
#pragma once

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/tensor_map.h"

namespace tessera::ops::cuda {

// `gate_up`: the boxes of the gate/up kernels, else of the down kernel (linear_ring.cu's too).
// `scales` is left as it is where the format has no scale map (FP8: its block scales are read from
// global memory). False when a map cannot be made (the driver has no encoder, or a base or stride
// is not 16-byte aligned).
bool encode_ring_maps(const QuantMatrix& m, bool gate_up, CUtensorMap* codes, CUtensorMap* scales);

}  // namespace tessera::ops::cuda
