// Weights in the CUDA backend's format (Ops::upload_linear / upload_vector / upload_table):
// matrices bf16 on the device, dequantized exactly on the host first (FP8, NVFP4); vectors fp32.
// One-time synchronous uploads, held for the backend's life.
#pragma once

#include "core/tensor.h"
#include "ops/cuda/runtime/context.h"
#include "ops/linear_weight.h"

namespace tessera::ops::cuda {

LinearWeight upload_linear(CudaContext& ctx, const LinearWeight& w);
core::Tensor upload_vector(CudaContext& ctx, const core::Tensor& t);
core::Tensor upload_table(CudaContext& ctx, const core::Tensor& t);

}  // namespace tessera::ops::cuda
