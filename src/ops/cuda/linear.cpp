#include "ops/cuda/linear.h"

#include "core/env.h"
#include "core/error.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/weights.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

namespace {

void check_linear_shapes(const Tensor& x, const LinearWeight& w, const Tensor& out) {
  TESSERA_CHECK(x.rank() == 2 && out.rank() == 2 && x.dim(1) == w.in && out.dim(1) == w.out && out.dim(0) == x.dim(0),
                "linear {}: input {} / output {} do not fit weight [{}, {}]", w.name, core::shape_str(x.shape()),
                core::shape_str(out.shape()), w.out, w.in);
}

// The matrix-vector kernel's arguments for out = x · Wᵀ (x [T, in], contiguous rows).
GemvArgs gemv_args(const Tensor& x, const LinearWeight& w, Tensor& out) {
  return {ptr<float>(x),
          w.in,
          0,
          ptr<__nv_bfloat16>(w.weight),
          w.in,
          0,
          ptr<float>(out),
          w.out,
          0,
          static_cast<int>(w.in),
          static_cast<int>(w.out),
          static_cast<int>(x.dim(0))};
}

// x [T, in] fp32 rounded to nearest bf16: a cuBLASLt GEMM's input.
Tensor rounded_to_bf16(CudaContext& ctx, const Tensor& x) {
  Tensor xb = ctx.alloc(DType::kBF16, {x.dim(0), x.dim(1)});
  launch_f32_to_bf16(ptr<float>(x), ptr<__nv_bfloat16>(xb), x.numel(), ctx.stream());
  return xb;
}

bool quantized(const LinearWeight& w) { return w.format != LinearWeight::Format::kDense; }

// Over the checkpoint's bytes up to kQuantMmaMaxTokens: on sm_90a, for 2 tokens or more and wide
// matrices (kLinearRingMinTokens, kLinearRingMinRows), the ring kernel (weights through shared
// memory by TMA, K split over a cluster); otherwise one token on the CUDA-core matrix-vector
// kernel (faster on short matrices than a tile of padding), more on tensor cores where the shape
// allows (activations split into two bf16 halves, not rounded), else the CUDA-core kernel up to its
// limit; beyond, the weight is dequantized to bf16 in pool memory for one cuBLASLt GEMM
// (compute-bound steps, where reading 2 more bytes a weight costs little next to the GEMM).
void quantized_linear(CudaContext& ctx, const Tensor& x, const LinearWeight& w, Tensor& out) {
  const int64_t T = x.dim(0);
  const QuantMatrix m = quant_matrix(w);
  const bool ring = T >= kLinearRingMinTokens && T <= kQuantMmaMaxTokens && m.n >= kLinearRingMinRows &&
                    linear_ring_on(ctx.caps()) && quant_linear_ring_supported(m);
  const bool mma = T <= kQuantMmaMaxTokens && quant_linear_mma_supported(m);
  if (!ring && (T == 1 || !mma) && T <= quant_gemv_max_tokens(m.format) && quant_gemv_supported(m)) {
    launch_quant_gemv(m, ptr<float>(x), x.dim(1), T, ptr<float>(out), ctx.num_sms(), ctx.stream());
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  if (ring || mma) {
    Tensor xs = ctx.alloc(DType::kBF16, {2, T, w.in});
    __nv_bfloat16* hi = ptr<__nv_bfloat16>(xs);
    launch_f32_to_bf16_split(ptr<float>(x), hi, hi + T * w.in, x.numel(), ctx.stream());
    if (!(ring && launch_quant_linear_ring(m, hi, hi + T * w.in, T, ptr<float>(out), ctx.num_sms(), ctx.stream())))
      launch_quant_linear_mma(m, hi, hi + T * w.in, T, ptr<float>(out), ctx.num_sms(), ctx.stream());
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const Tensor wb = dequantized_bf16(ctx, w);
  const Tensor xb = rounded_to_bf16(ctx, x);
  ctx.gemm_bf16(ptr<__nv_bfloat16>(wb), ptr<__nv_bfloat16>(xb), ptr<float>(out), w.out, T, w.in);
}

}  // namespace

bool linear_ring_on(const DeviceCaps& caps) { return linear_ring_enabled() && caps.sm == 90 && has_sm90a_code(); }

void linear(CudaContext& ctx, const Tensor& x, const LinearWeight& w, Tensor& out) {
  const int64_t T = x.dim(0);
  check_linear_shapes(x, w, out);
  if (T == 0) return;
  if (quantized(w)) return quantized_linear(ctx, x, w, out);
  if (!linear_takes_bf16(T, w)) {
    launch_gemv(gemv_args(x, w, out), 1, ctx.num_sms(), ctx.stream());
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const Tensor xb = rounded_to_bf16(ctx, x);
  linear_bf16(ctx, xb, w, out);
}

bool linear_takes_bf16(int64_t tokens, const LinearWeight& w) {
  return !quantized(w) && !gemv_applies(tokens, w.in, w.out);
}

void linear_bf16(CudaContext& ctx, const Tensor& xb, const LinearWeight& w, Tensor& out) {
  const int64_t T = xb.dim(0);
  TESSERA_CHECK(xb.dtype() == DType::kBF16 && xb.rank() == 2 && xb.dim(1) == w.in && out.dim(0) == T &&
                    out.dim(1) == w.out && linear_takes_bf16(T, w),
                "linear_bf16 {}: input [{}, {}] {} for [{}, {}] {} at {} tokens", w.name, xb.dim(0), xb.dim(1),
                core::dtype_name(xb.dtype()), w.out, w.in, w.format_name(), T);
  if (T == 0) return;
  ctx.gemm_bf16(ptr<__nv_bfloat16>(w.weight), ptr<__nv_bfloat16>(xb), ptr<float>(out), w.out, T, w.in);
}

bool quant_gemv_pair_on() {
  static const bool on = core::env_flag("TESSERA_QUANT_GEMV_PAIR");
  return on;
}

bool linear_pair(CudaContext& ctx, const Tensor& x, const LinearWeight& w1, Tensor& out1, const LinearWeight& w2,
                 Tensor& out2) {
  const int64_t T = x.dim(0);
  if (quantized(w1) || quantized(w2)) {
    // One token, where each would run on the matrix-vector kernel (quantized_linear): one launch
    // for both (DeepSeek-V3 FP8's q_a + kv_a: 384 + 144 row groups, where kv_a alone is half a wave).
    if (!(quantized(w1) && quantized(w2) && T == 1 && quant_gemv_pair_on())) return false;
    const QuantMatrix a = quant_matrix(w1), b = quant_matrix(w2);
    if (!quant_gemv_pair_supported(a, b)) return false;
    check_linear_shapes(x, w1, out1);
    check_linear_shapes(x, w2, out2);
    launch_quant_gemv(a, ptr<float>(x), x.dim(1), T, ptr<float>(out1), ctx.num_sms(), ctx.stream(), &b,
                      ptr<float>(out2));
    TESSERA_CUDA_CHECK_LAUNCH();
    return true;
  }
  if (w1.in != w2.in) return false;
  if (linear_takes_bf16(T, w1) && linear_takes_bf16(T, w2)) {
    // Two GEMMs over x rounded to bf16 once (prefill: one conversion of the step's rows fewer).
    check_linear_shapes(x, w1, out1);
    check_linear_shapes(x, w2, out2);
    const Tensor xb = rounded_to_bf16(ctx, x);
    linear_bf16(ctx, xb, w1, out1);
    linear_bf16(ctx, xb, w2, out2);
    return true;
  }
  if (!(gemv_applies(T, w1.in, w1.out) && gemv_applies(T, w2.in, w2.out))) return false;
  check_linear_shapes(x, w1, out1);
  check_linear_shapes(x, w2, out2);
  GemvArgs g = gemv_args(x, w1, out1);
  g.w2 = ptr<__nv_bfloat16>(w2.weight);
  g.w2_row = w2.in;
  g.out2 = ptr<float>(out2);
  g.out2_row = w2.out;
  g.n2 = static_cast<int>(w2.out);
  launch_gemv(g, 1, ctx.num_sms(), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
  return true;
}

bool rms_norm_linear(CudaContext& ctx, const Tensor& x, const Tensor& norm_weight, float eps, const LinearWeight& w,
                     Tensor& out) {
  const int64_t T = x.dim(0);
  if (quantized(w) || !(gemv_applies(T, w.in, w.out) && w.in <= kGemvNormMaxK)) return false;
  check_linear_shapes(x, w, out);
  TESSERA_CHECK(norm_weight.numel() == w.in, "rms_norm_linear {}: norm weight of {} values for input width {}", w.name,
                norm_weight.numel(), w.in);
  GemvArgs g = gemv_args(x, w, out);
  g.norm_weight = ptr<float>(norm_weight);
  g.norm_eps = eps;
  launch_gemv(g, 1, ctx.num_sms(), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace tessera::ops::cuda
