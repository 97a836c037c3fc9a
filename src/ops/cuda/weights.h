// Weights in the CUDA backend's format (Ops::upload_linear / upload_vector / upload_table):
// projections stay in their checkpoint format on the device (bf16, FP8 block or NVFP4: the bytes
// the checkpoint stores, computed on by the quantized kernels); an FP8 or NVFP4 kv_b or router is
// dequantized on the device to bf16, which the attention and router kernels read. Tables are bf16,
// vectors fp32. One-time synchronous uploads, held for the backend's life.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/context.h"
#include "ops/linear_weight.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

LinearWeight upload_linear(CudaContext& ctx, const LinearWeight& w, LinearUse use);
core::Tensor upload_vector(CudaContext& ctx, const core::Tensor& t);
core::Tensor upload_table(CudaContext& ctx, const core::Tensor& t);

// Pinned host memory (the loader's staging buffer: copies from it are DMA at full link speed).
std::shared_ptr<void> pinned_host_buffer(size_t bytes);

// Whether the backend holds `use` linears of this format and input width in it (else bf16).
bool keeps_quantized(LinearWeight::Format format, LinearUse use, int64_t in);
// A quantized device weight as the kernels take it.
QuantMatrix quant_matrix(const LinearWeight& w);
// A quantized device weight dequantized to bf16 [out, in] (exactly as the host did before weights
// stayed quantized), in memory from the pool, or held for the backend's life when `resident`.
core::Tensor dequantized_bf16(CudaContext& ctx, const LinearWeight& w, bool resident = false);

}  // namespace tessera::ops::cuda
