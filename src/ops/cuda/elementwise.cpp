#include "ops/cuda/elementwise.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

void embedding(CudaContext& ctx, const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t vocab = table.dim(0);
  for (size_t t = 0; t < ids.size(); ++t)
    TESSERA_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} at position {} is outside the vocabulary [0, {})", ids[t],
                  t, vocab);
  Tensor d_ids = ctx.upload_async(DType::kI32, {static_cast<int64_t>(ids.size())}, ids.data());
  launch_embedding(ptr<__nv_bfloat16>(table), ptr<int32_t>(d_ids), static_cast<int64_t>(ids.size()), table.dim(1),
                   ptr<float>(out), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void rms_norm(CudaContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t col_begin) {
  launch_rms_norm(ptr<float>(x), x.dim(0), x.dim(1), col_begin, ptr<float>(weight), weight.numel(), eps,
                  ptr<float>(out), out.dim(1), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void add_rms_norm(CudaContext& ctx, Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) {
  TESSERA_CHECK(x.shape() == y.shape() && x.shape() == out.shape() && weight.numel() == x.dim(1),
                "add_rms_norm: x {}, y {}, out {} and weight [{}] do not fit", core::shape_str(x.shape()),
                core::shape_str(y.shape()), core::shape_str(out.shape()), weight.numel());
  launch_add_rms_norm(ptr<float>(x), ptr<float>(y), x.dim(0), x.dim(1), ptr<float>(weight), eps, ptr<float>(out),
                      ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void add_inplace(CudaContext& ctx, Tensor& x, const Tensor& y) {
  launch_add(ptr<float>(x), ptr<float>(y), x.numel(), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void silu_mul(CudaContext& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  launch_silu_mul(ptr<float>(gate), ptr<float>(up), ptr<float>(out), gate.numel(), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void rope_inplace(CudaContext& ctx, Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                  int64_t count) {
  const int64_t rows = x.dim(0);
  launch_rope(ptr<float>(x), rows, x.numel() / std::max<int64_t>(rows, 1), ptr<float>(tables.cos),
              ptr<float>(tables.sin), tables.cos.dim(1), col_begin, col_stride, count, ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::ops::cuda
