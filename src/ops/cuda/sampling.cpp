#include "ops/cuda/sampling.h"

#include "core/env.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/sampling/sampling.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/sample_args.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

void gather_rows(CudaContext& ctx, const Tensor& x, std::span<const int64_t> rows, Tensor& out) {
  Tensor d_rows = ctx.upload_async(DType::kI64, {static_cast<int64_t>(rows.size())}, rows.data());
  launch_gather_rows(ptr<float>(x), x.dim(1), ptr<int64_t>(d_rows), static_cast<int64_t>(rows.size()), ptr<float>(out),
                     ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mask_logits(CudaContext& ctx, Tensor& logits, std::span<const uint32_t> bitmask) {
  check_mask_args(logits, bitmask);
  if (logits.numel() == 0) return;
  Tensor d_mask = ctx.upload_async(DType::kU8, {static_cast<int64_t>(bitmask.size_bytes())}, bitmask.data());
  launch_mask_logits(ptr<float>(logits), logits.dim(0), logits.dim(1), d_mask.data<uint32_t>(), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void sample(CudaContext& ctx, const Tensor& logits, std::span<const SampleRow> rows, Tensor& ids_out,
            Tensor* logprob_out) {
  check_sample_args(logits, rows, ids_out, logprob_out);
  if (rows.empty()) return;
  Tensor d_rows = ctx.upload_async(DType::kU8, {static_cast<int64_t>(rows.size_bytes())}, rows.data());
  launch_sample(ptr<float>(logits), logits.dim(0), logits.dim(1), d_rows.data<SampleRow>(), ptr<int32_t>(ids_out),
                logprob_out ? ptr<float>(*logprob_out) : nullptr,
                core::env_flag("TESSERA_SAMPLE_CLUSTERS")
                    ? sample_blocks_per_row(logits.dim(0), ctx.caps().sm, ctx.caps().num_sms)
                    : 1,
                core::env_flag("TESSERA_SAMPLE_FEWER_PASSES"), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::ops::cuda
