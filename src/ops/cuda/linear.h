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
// Whether linear runs a step of `tokens` as one cuBLASLt GEMM over x rounded to bf16 (a dense weight,
// beyond the matrix-vector kernel): then a caller that makes the activations itself may write them
// in bf16 and call linear_bf16, saving the fp32 pass and the conversion (same bits).
bool linear_takes_bf16(int64_t tokens, const LinearWeight& w);
// linear's GEMM over activations already rounded to bf16 (xb [T, in] bf16; linear_takes_bf16(T, w)).
void linear_bf16(CudaContext& ctx, const core::Tensor& xb, const LinearWeight& w, core::Tensor& out);
// Whether two quantized projections of one token share a matrix-vector launch in linear_pair
// (default; TESSERA_QUANT_GEMV_PAIR=0 runs them as two launches, for A/B).
bool quant_gemv_pair_on();
// Two projections of one input in one matrix-vector launch at decode (q_a and kv_a; quantized ones
// at one token with quant_gemv_pair_on), or, where both are bf16 GEMMs (linear_takes_bf16), as two
// GEMMs over one bf16 copy of x. False, with nothing launched, when neither applies: the caller runs
// Ops::linear_pair.
bool linear_pair(CudaContext& ctx, const core::Tensor& x, const LinearWeight& w1, core::Tensor& out1,
                 const LinearWeight& w2, core::Tensor& out2);
// The norm folded into the matrix-vector kernel at decode: every block normalises the row itself.
// False, with nothing launched, when the shapes do not fit: the caller runs Ops::rms_norm_linear.
bool rms_norm_linear(CudaContext& ctx, const core::Tensor& x, const core::Tensor& norm_weight, float eps,
                     const LinearWeight& w, core::Tensor& out);

}  // namespace tessera::ops::cuda
