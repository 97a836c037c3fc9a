#include "ops/cuda/mla.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/kernel_registry.h"
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

// q_full[t, h] = [q_nope[t, h] · W_UK[h] | q_pe[t, h]] for d.heads heads, W_UK[h] = kv_b rows
// [h(nope+v), h(nope+v)+nope). The tensor-core paths (every kernel but the CUDA-core one) absorb
// W_UK as per-head batched bf16 GEMMs over the hi and lo bf16 parts of the fp32 input (so only the
// weights are bf16, as in the fp32 path, which keeps every product on CUDA cores); a few tokens
// run matrix-vector kernels (kernels/linear/gemv.cu) on the fp32 input instead.
void absorb_queries(CudaContext& ctx, const Tensor& q, const LinearWeight& kv_b, const MlaDims& d, MlaKernel kernel,
                    Tensor& q_full) {
  const int64_t T = q.dim(0), H = d.heads, entry = d.latent + d.rope, qk = d.nope + d.rope;
  const __nv_bfloat16* kv_b_w = ptr<__nv_bfloat16>(kv_b.weight);
  const cudaStream_t stream = ctx.stream();
  if (kernel != MlaKernel::kCudaCore && gemv_transposed_applies(T, d.latent)) {
    // q_pe passes through in the same kernel.
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
  } else if (kernel != MlaKernel::kCudaCore) {
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
}

// out[t, h*v + j] = o_lat[t, h] · W_UV[h][j] for d.heads heads, W_UV[h] = kv_b rows [h(nope+v)+nope,
// (h+1)(nope+v)); o_lat's rows are o_lat_row floats apart. The same three paths as absorb_queries.
void up_project(CudaContext& ctx, const float* o_lat, int64_t o_lat_row, int64_t T, const LinearWeight& kv_b,
                const MlaDims& d, MlaKernel kernel, Tensor& out) {
  const int64_t H = d.heads;
  const __nv_bfloat16* w_uv = ptr<__nv_bfloat16>(kv_b.weight) + d.nope * d.latent;
  const cudaStream_t stream = ctx.stream();
  if (kernel != MlaKernel::kCudaCore && gemv_applies(T, d.latent, d.v)) {
    launch_gemv({o_lat, o_lat_row, d.latent, w_uv, d.latent, (d.nope + d.v) * d.latent, ptr<float>(out), H * d.v, d.v,
                 static_cast<int>(d.latent), static_cast<int>(d.v), static_cast<int>(T)},
                H, ctx.num_sms(), stream);
  } else if (kernel != MlaKernel::kCudaCore) {
    // The hi and lo bf16 parts of o_lat's rows (the heads used, packed).
    Tensor ob = ctx.alloc(DType::kBF16, {2, T, H * d.latent});
    __nv_bfloat16* o_hi = ptr<__nv_bfloat16>(ob);
    __nv_bfloat16* o_lo = o_hi + T * H * d.latent;
    if (o_lat_row == H * d.latent) {
      launch_f32_to_bf16_split(o_lat, o_hi, o_lo, T * H * d.latent, stream);
    } else {
      Tensor packed = ctx.alloc(DType::kF32, {T, H * d.latent});
      if (admit_op("memcpy2d", ptr<float>(packed), H * d.latent, o_lat, o_lat_row, H * d.latent, T, stream))
        TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(ptr<float>(packed), H * d.latent * 4, o_lat, o_lat_row * 4,
                                             H * d.latent * 4, T, cudaMemcpyDeviceToDevice, stream));
      launch_f32_to_bf16_split(ptr<float>(packed), o_hi, o_lo, T * H * d.latent, stream);
    }
    const GemmShape up_v{true,     d.v, T, d.latent, d.latent, H * d.latent, H * d.v, H, (d.nope + d.v) * d.latent,
                         d.latent, d.v};
    ctx.gemm_bf16_strided(up_v, w_uv, o_hi, ptr<float>(out));
    ctx.gemm_bf16_strided(up_v, w_uv, o_lo, ptr<float>(out), 1.0f);
  } else {
    launch_mla_up_v(o_lat, o_lat_row, T, H, d.latent, ptr<__nv_bfloat16>(kv_b.weight), d.nope, d.v, ptr<float>(out),
                    stream);
  }
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
        [&ctx](DType t, core::Shape s, const void* host) { return ctx.upload_async(t, std::move(s), host); },
        ctx.caps().sm == 90 && has_sm90a_code()};
    return run_mla_prefill_step(env, q, cache, kv_b, d, seqs, out,
                                [&](const Tensor& qd, std::span<const AttentionSeq> sd, Tensor& od) {
                                  mla_attention(ctx, qd, cache, kv_b, d, sd, od);
                                });
  }
  // --- end MLA prefill
  const int64_t T = q.dim(0), H = d.heads, entry = d.latent + d.rope;
  StepMeta meta = ctx.upload_meta(seqs, cache.page_size, cache.pages.dim(0));
  const MlaKernel kernel = plan.absorbed_kernel(decode_only);
  Tensor q_full = ctx.alloc(DType::kF32, {T, H, entry});
  absorb_queries(ctx, q, kv_b, d, kernel, q_full);
  Tensor o_lat = ctx.alloc(DType::kF32, {T, H, d.latent});
  const MlaDecodeLaunch how = mla_decode_launch(ctx.caps().sm, decode_only);
  const int64_t splits = mla_attend_splits(T, H, meta.max_visible, ctx.num_sms(), kernel, how.wgmma_pairs);
  Tensor scratch = ctx.alloc(DType::kF32, {mla_attend_scratch_floats(T, H, d.latent, splits)});
  launch_mla_attend(ptr<float>(q_full), T, H, d.latent, d.rope, meta.info.data<TokenInfo>(), ptr<int32_t>(meta.tables),
                    cache_in, cache.pages.dim(0), cache.page_size, splits, d.scale, ptr<float>(o_lat),
                    ptr<float>(scratch), kernel, stream, nullptr, how);
  up_project(ctx, ptr<float>(o_lat), H * d.latent, T, kv_b, d, kernel, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_absorb_q(CudaContext& ctx, const Tensor& q, const LinearWeight& kv_b, const MlaDims& d, Tensor& q_full) {
  const int64_t T = q.dim(0), entry = d.latent + d.rope;
  TESSERA_CHECK(q.numel() == T * d.heads * (d.nope + d.rope) && q_full.numel() == T * d.heads * entry &&
                    kv_b.out == d.heads * (d.nope + d.v) && kv_b.in == d.latent,
                "mla_absorb_q: q {}, q_full {} and kv_b [{}, {}] do not fit {} heads of {} + {}, latent {}",
                core::shape_str(q.shape()), core::shape_str(q_full.shape()), kv_b.out, kv_b.in, d.heads, d.nope, d.rope,
                d.latent);
  absorb_queries(ctx, q, kv_b, d, ctx.mla_plan(d, false).absorbed_kernel(true), q_full);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_attend_latent(CudaContext& ctx, const Tensor& q_full, const KvLayerView& cache, const MlaDims& d,
                       std::span<const AttentionSeq> seqs, bool decode_step, Tensor& o_lat, Tensor& lse) {
  const KvCacheArg cache_in = cache_arg(cache, "mla_attend_latent");
  const int64_t T = q_full.dim(0), entry = d.latent + d.rope;
  TESSERA_CHECK(q_full.numel() == T * d.heads * entry && o_lat.numel() == T * d.heads * d.latent &&
                    lse.numel() == T * d.heads && static_cast<int64_t>(seqs.size()) == T,
                "mla_attend_latent: q_full {}, o_lat {}, lse {} and {} sequences do not fit {} tokens of {} heads, "
                "latent {} + {} (a sequence a token)",
                core::shape_str(q_full.shape()), core::shape_str(o_lat.shape()), core::shape_str(lse.shape()),
                seqs.size(), T, d.heads, d.latent, d.rope);
  for (size_t i = 0; i < seqs.size(); ++i)
    TESSERA_CHECK(seqs[i].num_tokens == 1 && seqs[i].token_begin == static_cast<int64_t>(i) && seqs[i].start_pos >= -1,
                  "mla_attend_latent: sequence {} has {} tokens at row {}, position {} (the kernels take one token a "
                  "sequence, in row order, position >= -1)",
                  i, seqs[i].num_tokens, seqs[i].token_begin, seqs[i].start_pos);
  TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == entry,
                "mla_attend_latent: cache entry {} != latent width {}",
                cache.pages.rank() == 3 ? cache.pages.dim(2) : 0, entry);
  if (T == 0) return;
  const MlaKernel kernel = ctx.mla_plan(d, cache_in.fp8).absorbed_kernel(decode_step);
  StepMeta meta = ctx.upload_meta(seqs, cache.page_size, cache.pages.dim(0));
  const MlaDecodeLaunch how = mla_decode_launch(ctx.caps().sm, decode_step);
  const int64_t splits =
      mla_attend_splits(T, d.heads, std::max<int64_t>(1, meta.max_visible), ctx.num_sms(), kernel, how.wgmma_pairs);
  Tensor scratch = ctx.alloc(DType::kF32, {mla_attend_scratch_floats(T, d.heads, d.latent, splits)});
  launch_mla_attend(ptr<float>(q_full), T, d.heads, d.latent, d.rope, meta.info.data<TokenInfo>(),
                    ptr<int32_t>(meta.tables), cache_in, cache.pages.dim(0), cache.page_size, splits, d.scale,
                    ptr<float>(o_lat), ptr<float>(scratch), kernel, ctx.stream(), ptr<float>(lse), how);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_rank_weigh(CudaContext& ctx, Tensor& o_lat, const Tensor& lse, const Tensor& lse_all) {
  const int64_t T = lse.dim(0);
  if (T == 0) return;
  const int64_t heads = lse.numel() / T, ranks = lse_all.numel() / (T * heads), latent = o_lat.numel() / (T * heads);
  TESSERA_CHECK(ranks >= 1 && lse_all.numel() == T * heads * ranks && o_lat.numel() == T * heads * latent,
                "mla_rank_weigh: o_lat {}, lse {} and lse_all {} do not fit one another",
                core::shape_str(o_lat.shape()), core::shape_str(lse.shape()), core::shape_str(lse_all.shape()));
  launch_mla_rank_weigh(ptr<float>(o_lat), ptr<float>(lse), ptr<float>(lse_all), T, heads, ranks, latent, ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
}

void mla_up_v(CudaContext& ctx, const Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& d,
              Tensor& out) {
  const int64_t T = out.dim(0);
  const int64_t all_heads = T > 0 ? o_lat.numel() / (T * d.latent) : 0;
  TESSERA_CHECK(out.numel() == T * d.heads * d.v && o_lat.numel() == T * all_heads * d.latent && head_begin >= 0 &&
                    head_begin + d.heads <= all_heads && kv_b.out == d.heads * (d.nope + d.v) && kv_b.in == d.latent,
                "mla_up_v: o_lat {} has no heads [{}, {}) of latent {} for out {} and kv_b [{}, {}]",
                core::shape_str(o_lat.shape()), head_begin, head_begin + d.heads, d.latent,
                core::shape_str(out.shape()), kv_b.out, kv_b.in);
  if (T == 0) return;
  up_project(ctx, ptr<float>(o_lat) + head_begin * d.latent, all_heads * d.latent, T, kv_b, d,
             ctx.mla_plan(d, false).absorbed_kernel(true), out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::ops::cuda
