// Elementwise and row ops of the CUDA backend: embedding, RMSNorm (and the residual add fused with
// it), add, SiLU-and-multiply, RoPE (kernels/elementwise/elementwise.cu). One launch each.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/cuda/runtime/context.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

// Ops::embedding for a bf16 table (upload_table's format); the ids are checked on the host.
void embedding(CudaContext& ctx, const core::Tensor& table, std::span<const int32_t> ids, core::Tensor& out);
void rms_norm(CudaContext& ctx, const core::Tensor& x, const core::Tensor& weight, float eps, core::Tensor& out,
              int64_t col_begin);
void add_rms_norm(CudaContext& ctx, core::Tensor& x, const core::Tensor& y, const core::Tensor& weight, float eps,
                  core::Tensor& out);
void add_inplace(CudaContext& ctx, core::Tensor& x, const core::Tensor& y);
void silu_mul(CudaContext& ctx, const core::Tensor& gate, const core::Tensor& up, core::Tensor& out);
void rope_inplace(CudaContext& ctx, core::Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                  int64_t count);

}  // namespace tessera::ops::cuda
