// Token selection of the CUDA backend: the rows of logits wanted (gather_rows) and Ops::sample on
// the device (kernels/sampling/sampling.cu), so only token ids (and logprobs) come back to the host.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/cuda/runtime/context.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

void gather_rows(CudaContext& ctx, const core::Tensor& x, std::span<const int64_t> rows, core::Tensor& out);
void mask_logits(CudaContext& ctx, core::Tensor& logits, std::span<const uint32_t> bitmask);
void sample(CudaContext& ctx, const core::Tensor& logits, std::span<const SampleRow> rows, core::Tensor& ids_out,
            core::Tensor* logprob_out);

}  // namespace tessera::ops::cuda
