// MLA attention of the CUDA backend: the paged latent KV cache (pages, writes), the fused layer
// inputs (mla_prepare) and attention itself. Decode runs in the absorbed form on the kernel the
// plan picks (kernel_registry.h: plan_mla), with W_UK and W_UV as matrix-vector kernels for a few
// tokens, split-bf16 batched GEMMs on the tensor-core paths, or fp32 kernels on the CUDA-core one;
// steps with prefill chunks go to the decompressed path (mla_prefill.h) where the plan says so.
#pragma once

#include <span>

#include "core/tensor.h"
#include "ops/cuda/runtime/context.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

// Ops::empty_kv_pages: bf16 pages, or U8 pages of fp8 e4m3, zeroed, held for the backend's life.
// An fp8 cache is refused here, at start-up, when a forced MLA kernel reads bf16 only.
core::Tensor empty_kv_pages(CudaContext& ctx, core::Shape shape, core::KvCacheDtype dtype);
void kv_cache_write(CudaContext& ctx, KvLayerView& cache, const core::Tensor& latent,
                    std::span<const AttentionSeq> seqs);
void mla_prepare(CudaContext& ctx, core::Tensor& q, core::Tensor& latent, const core::Tensor& latent_norm, float eps,
                 const RopeTables& tables, const MlaDims& d, KvLayerView& cache, std::span<const AttentionSeq> seqs);
void mla_attention(CudaContext& ctx, const core::Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                   const MlaDims& d, std::span<const AttentionSeq> seqs, core::Tensor& out);
// The parts of MLA over a cache sharded by position (Ops::mla_absorb_q ... mla_up_v). The attention
// runs the plan's decode kernel for a decode step, else its kernel for prefill chunks.
void mla_absorb_q(CudaContext& ctx, const core::Tensor& q, const LinearWeight& kv_b, const MlaDims& d,
                  core::Tensor& q_full);
void mla_attend_latent(CudaContext& ctx, const core::Tensor& q_full, const KvLayerView& cache, const MlaDims& d,
                       std::span<const AttentionSeq> seqs, bool decode_step, core::Tensor& o_lat, core::Tensor& lse);
void mla_rank_weigh(CudaContext& ctx, core::Tensor& o_lat, const core::Tensor& lse, const core::Tensor& lse_all);
void mla_up_v(CudaContext& ctx, const core::Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b,
              const MlaDims& d, core::Tensor& out);

}  // namespace tessera::ops::cuda
