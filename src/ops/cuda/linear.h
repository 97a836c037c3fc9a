// Dense projections of the CUDA backend (Ops::linear and the fused linear_pair / rms_norm_linear):
// matrix-vector kernels for decode steps of a few tokens (kernels/linear/gemv.cu), cuBLASLt GEMMs
// with bf16 inputs and fp32 accumulation otherwise.
#pragma once

#include "core/tensor.h"
#include "ops/cuda/runtime/context.h"
#include "ops/linear_weight.h"

namespace tessera::ops::cuda {

// Whether the ring kernel (kernels/quant/linear_ring.cu) is there for NVFP4 / FP8 projections: an
// sm_90 GPU with sm_90a code in the build, unless TESSERA_LINEAR_RING=0. Which steps and matrices
// take it: kLinearRingMinTokens, kLinearRingMinRows (kernels.h).
bool linear_ring_on(const DeviceCaps& caps);

// out [T, out] = x [T, in] · Wᵀ, bf16 inputs, fp32 accumulate and output.
void linear(CudaContext& ctx, const core::Tensor& x, const LinearWeight& w, core::Tensor& out);
// Whether two quantized projections of one token share a matrix-vector launch in linear_pair
// (TESSERA_QUANT_GEMV_PAIR=1; off by default until measured on a GPU).
bool quant_gemv_pair_on();
// Two projections of one input in one matrix-vector launch at decode (q_a and kv_a; quantized ones
// at one token with quant_gemv_pair_on). False, with nothing launched, when the shapes do not fit
// that kernel: the caller runs Ops::linear_pair.
bool linear_pair(CudaContext& ctx, const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1,
                 const LinearWeight& w2, core::Tensor& out2);
// The norm folded into the matrix-vector kernel at decode: every block normalises the row itself.
// False, with nothing launched, when the shapes do not fit: the caller runs Ops::rms_norm_linear.
bool rms_norm_linear(CudaContext& ctx, const core::Tensor& x, const core::Tensor& norm_weight, float eps,
                     const LinearWeight& w, core::Tensor& out);

}  // namespace tessera::ops::cuda
