#include "ops/cuda/mla.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/mla_prefill.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

namespace {

// The forced heads-as-M and wgmma kernels read bf16 only: refused when the cache is made, before
// any shape is known.
void check_mla_kernel_reads(const CudaContext& ctx, bool fp8) {
  const KernelOverrides& overrides = ctx.overrides();
  TESSERA_CHECK(!fp8 || !overrides.mla || reads_fp8_cache(*overrides.mla),
                "MLA kernel '{}' (--kernels mla={}) cannot read an fp8_e4m3 KV cache (--kv-cache-dtype fp8): it "
                "reads bf16 only; use --kernels mla=kv-major or mla=cuda-core, or --kv-cache-dtype bf16",
                kernel_flag_name(*overrides.mla), kernel_flag_name(*overrides.mla));
}

// The cache as the kernels take it; throws naming `op` for pages of another dtype or an fp8 scale
// that is not a positive finite number.
KvCacheArg cache_arg(const KvLayerView& cache, const char* op) {
  const DType t = cache.pages.dtype();
  TESSERA_CHECK(t == DType::kBF16 || t == DType::kU8,
                "{}: KV pages of dtype {} (the cuda backend stores BF16 or U8 fp8 e4m3)", op, core::dtype_name(t));
  TESSERA_CHECK(t == DType::kBF16 || (std::isfinite(cache.scale) && cache.scale > 0.0f),
                "{}: the fp8 KV cache scale {} is not a positive finite number", op, cache.scale);
  return {cache.pages.raw(), t == DType::kU8, t == DType::kU8 ? cache.scale : 1.0f};
}

}  // namespace

Tensor empty_kv_pages(CudaContext& ctx, core::Shape shape, core::KvCacheDtype dtype) {
  TESSERA_CHECK(dtype == core::KvCacheDtype::kBF16 || dtype == core::KvCacheDtype::kFp8E4M3,
                "the cuda backend stores the KV cache in bf16 or fp8_e4m3, not {}", core::kv_cache_dtype_name(dtype));
  check_mla_kernel_reads(ctx, dtype == core::KvCacheDtype::kFp8E4M3);  // refuse at start-up, not at the first decode
  Tensor t = ctx.alloc_resident(dtype == core::KvCacheDtype::kBF16 ? DType::kBF16 : DType::kU8, std::move(shape));
  TESSERA_CUDA_CHECK(cudaMemset(t.raw(), 0, t.nbytes()));
  return t;
}

void kv_cache_write(CudaContext& ctx, KvLayerView& cache, const Tensor& latent, std::span<const AttentionSeq> seqs) {
  const KvCacheArg arg = cache_arg(cache, "kv_cache_write");
  TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == latent.dim(1),
                "kv_cache_write: cache entry {} != latent width {}", cache.pages.rank() == 3 ? cache.pages.dim(2) : 0,
                latent.dim(1));
  StepMeta meta = ctx.upload_meta(seqs, cache.page_size, cache.pages.dim(0));
  if (arg.fp8)
    launch_kv_cache_write_fp8(ptr<float>(latent), latent.dim(0), latent.dim(1), meta.info.data<TokenInfo>(),
                              ptr<int32_t>(meta.tables), ptr<uint8_t>(cache.pages), cache.page_size, arg.scale,
                              ctx.stream());
  else
    launch_kv_cache_write(ptr<float>(latent), latent.dim(0), latent.dim(1), meta.info.data<TokenInfo>(),
                          ptr<int32_t>(meta.tables), ptr<__nv_bfloat16>(cache.pages), cache.page_size, ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_prepare(CudaContext& ctx, Tensor& q, Tensor& latent, const Tensor& latent_norm, float eps,
                 const RopeTables& tables, const MlaDims& d, KvLayerView& cache, std::span<const AttentionSeq> seqs) {
  const KvCacheArg arg = cache_arg(cache, "mla_prepare");
  const int64_t T = q.dim(0), entry = d.latent + d.rope;
  TESSERA_CHECK(q.rank() == 2 && q.dim(1) == d.heads * (d.nope + d.rope) && latent.rank() == 2 && latent.dim(0) == T &&
                    latent.dim(1) == entry && latent_norm.numel() == d.latent && d.rope % 2 == 0 &&
                    tables.cos.dim(1) == d.rope / 2,
                "mla_prepare: q {}, latent {}, norm [{}] and rope tables [{}] do not fit {} heads of {} + {}, "
                "latent {} + {}",
                core::shape_str(q.shape()), core::shape_str(latent.shape()), latent_norm.numel(), tables.cos.dim(1),
                d.heads, d.nope, d.rope, d.latent, d.rope);
  TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == entry,
                "mla_prepare: cache entry {} != latent width {}", cache.pages.rank() == 3 ? cache.pages.dim(2) : 0,
                entry);
  StepMeta meta = ctx.upload_meta(seqs, cache.page_size, cache.pages.dim(0));
  const MlaPrepareArgs a{ptr<float>(q),
                         q.dim(1),
                         static_cast<int>(d.heads),
                         static_cast<int>(d.nope),
                         static_cast<int>(d.rope),
                         static_cast<int>(d.latent),
                         ptr<float>(latent),
                         ptr<float>(latent_norm),
                         eps,
                         ptr<float>(tables.cos),
                         ptr<float>(tables.sin),
                         meta.info.data<TokenInfo>(),
                         ptr<int32_t>(meta.tables),
                         cache.page_size,
                         arg.scale,
                         T};
  launch_mla_prepare(a, cache.pages.raw(), arg.fp8, ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_attention(CudaContext& ctx, const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                   const MlaDims& d, std::span<const AttentionSeq> seqs, Tensor& out) {
  const KvCacheArg cache_in = cache_arg(cache, "mla_attention");
  const MlaPlan& plan = ctx.mla_plan(d, cache_in.fp8);
  const bool decode_only =
      std::all_of(seqs.begin(), seqs.end(), [](const AttentionSeq& s) { return s.num_tokens <= 1; });
  const cudaStream_t stream = ctx.stream();
  // --- MLA prefill over decompressed K/V (mla_prefill.h): sequences with more than one new token
  // run there where the plan says so; the step's decode tokens come back here, compacted, as a
  // decode-only step.
  if (!decode_only && plan.prefill == MlaPrefillKernel::kDecompressed) {
    const MlaPrefillEnv env{
        ctx.lt(),
        ctx.workspace(),
        CudaContext::kWorkspaceBytes,
        stream,
        [&ctx](DType t, core::Shape s) { return ctx.alloc(t, std::move(s)); },
        [&ctx](DType t, core::Shape s, const void* host) { return ctx.upload_async(t, std::move(s), host); }};
    return run_mla_prefill_step(env, q, cache, kv_b, d, seqs, out,
                                [&](const Tensor& qd, std::span<const AttentionSeq> sd, Tensor& od) {
                                  mla_attention(ctx, qd, cache, kv_b, d, sd, od);
                                });
  }
  // --- end MLA prefill
  const int64_t T = q.dim(0), H = d.heads, entry = d.latent + d.rope, qk = d.nope + d.rope;
  StepMeta meta = ctx.upload_meta(seqs, cache.page_size, cache.pages.dim(0));
  const MlaKernel kernel = plan.absorbed_kernel(decode_only);
  const __nv_bfloat16* kv_b_w = ptr<__nv_bfloat16>(kv_b.weight);
  // The tensor-core path absorbs W_UK and applies W_UV as per-head batched bf16 GEMMs, each over
  // the hi and lo bf16 parts of its fp32 input (so only the weights are bf16, as in the fp32
  // path, which keeps every product on CUDA cores).
  const bool gemms = kernel != MlaKernel::kCudaCore;
  // A few decode tokens: W_UK and W_UV as matrix-vector kernels (kernels/linear/gemv.cu) on the fp32 inputs.
  const bool gemv = gemms && gemv_transposed_applies(T, d.latent) && gemv_applies(T, d.latent, d.v);
  Tensor q_full = ctx.alloc(DType::kF32, {T, H, entry});
  if (gemv) {
    // q_full[t, h, :latent] = Σ_n q_nope[t, h, n] · W_UK[h][n, :]; q_pe passes through in the
    // same kernel.
    GemvArgs absorb{ptr<float>(q),
                    H * qk,
                    qk,
                    kv_b_w,
                    d.latent,
                    (d.nope + d.v) * d.latent,
                    ptr<float>(q_full),
                    H * entry,
                    entry,
                    static_cast<int>(d.nope),
                    static_cast<int>(d.latent),
                    static_cast<int>(T)};
    absorb.pass_through = static_cast<int>(d.rope);
    launch_gemv_transposed(absorb, H, stream);
  } else if (gemms) {
    // q_full[t, h, :latent] = q_nope[t, h] · W_UK[h], W_UK[h] = kv_b rows [h(nope+v), h(nope+v)+nope).
    Tensor qb = ctx.alloc(DType::kBF16, {2, T, H * qk});
    __nv_bfloat16* q_hi = ptr<__nv_bfloat16>(qb);
    __nv_bfloat16* q_lo = q_hi + T * H * qk;
    launch_f32_to_bf16_split(ptr<float>(q), q_hi, q_lo, q.numel(), stream);
    const GemmShape absorb{false, d.latent, T, d.nope, d.latent, H * qk, H * entry, H, (d.nope + d.v) * d.latent,
                           qk,    entry};
    ctx.gemm_bf16_strided(absorb, kv_b_w, q_hi, ptr<float>(q_full));
    ctx.gemm_bf16_strided(absorb, kv_b_w, q_lo, ptr<float>(q_full), 1.0f);
    // q_pe passes through.
    if (admit_op("memcpy2d", ptr<float>(q_full) + d.latent, entry, ptr<float>(q) + d.nope, qk, d.rope, T * H, stream))
      TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(ptr<float>(q_full) + d.latent, entry * 4, ptr<float>(q) + d.nope, qk * 4,
                                           d.rope * 4, T * H, cudaMemcpyDeviceToDevice, stream));
  } else {
    launch_mla_absorb_q(ptr<float>(q), T, H, d.nope, d.rope, kv_b_w, d.v, d.latent, ptr<float>(q_full), stream);
  }
  Tensor o_lat = ctx.alloc(DType::kF32, {T, H, d.latent});
  const int64_t splits = mla_attend_splits(T, H, meta.max_visible, ctx.num_sms(), kernel);
  Tensor scratch = ctx.alloc(DType::kF32, {mla_attend_scratch_floats(T, H, d.latent, splits)});
  launch_mla_attend(ptr<float>(q_full), T, H, d.latent, d.rope, meta.info.data<TokenInfo>(), ptr<int32_t>(meta.tables),
                    cache_in, cache.pages.dim(0), cache.page_size, splits, d.scale, ptr<float>(o_lat),
                    ptr<float>(scratch), kernel, stream);
  if (gemv) {
    // out[t, h*v + j] = o_lat[t, h] · W_UV[h][j], W_UV[h] = kv_b rows [h(nope+v)+nope, (h+1)(nope+v)).
    launch_gemv(
        {ptr<float>(o_lat), H * d.latent, d.latent, kv_b_w + d.nope * d.latent, d.latent, (d.nope + d.v) * d.latent,
         ptr<float>(out), H * d.v, d.v, static_cast<int>(d.latent), static_cast<int>(d.v), static_cast<int>(T)},
        H, ctx.num_sms(), stream);
  } else if (gemms) {
    // out[t, h*v + j] = Σ_l o_lat[t, h, l] · W_UV[h][j, l], W_UV[h] = kv_b rows [h(nope+v)+nope, (h+1)(nope+v)).
    Tensor ob = ctx.alloc(DType::kBF16, {2, T, H * d.latent});
    __nv_bfloat16* o_hi = ptr<__nv_bfloat16>(ob);
    __nv_bfloat16* o_lo = o_hi + T * H * d.latent;
    launch_f32_to_bf16_split(ptr<float>(o_lat), o_hi, o_lo, o_lat.numel(), stream);
    const GemmShape up_v{true,     d.v, T, d.latent, d.latent, H * d.latent, H * d.v, H, (d.nope + d.v) * d.latent,
                         d.latent, d.v};
    ctx.gemm_bf16_strided(up_v, kv_b_w + d.nope * d.latent, o_hi, ptr<float>(out));
    ctx.gemm_bf16_strided(up_v, kv_b_w + d.nope * d.latent, o_lo, ptr<float>(out), 1.0f);
  } else {
    launch_mla_up_v(ptr<float>(o_lat), T, H, d.latent, kv_b_w, d.nope, d.v, ptr<float>(out), stream);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::ops::cuda
