// Host side of the MLA prefill path (mla_prefill.h): checks the arguments, plans passes over the
// context, uploads the plan once, then per pass gathers latents, decompresses K/V (cuBLASLt) and
// runs the attention kernel; the decode tokens go to the caller's absorbed path.
#include "ops/cuda/mla_prefill.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

namespace {

constexpr int64_t kPassKvBytes = int64_t{256} << 20;
constexpr int64_t kMinPassRows = 64;  // a pass holds at least this many context positions

struct Pass {
  int64_t rows = 0;            // context positions held, over all chunks
  int64_t max_chunk_rows = 0;  // the gather kernel's grid
  std::vector<PrefillChunk> chunks;
  std::vector<PrefillTile> tiles;
  size_t chunk_at = 0, tile_at = 0;  // int32 offsets in the uploaded plan
};

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

// Slices every prefill sequence's context [0, start_pos + num_tokens) into chunks of at most
// `pass_rows` positions and packs them into passes in order. Tiles: each chunk's query rows by
// `query_rows` (the attention block's height),
// dropping those that see none of the chunk's keys unless the chunk must finish them; heaviest
// tiles first so that the long causal rows start early.
std::vector<Pass> plan_passes(std::span<const AttentionSeq> prefill, const std::vector<int32_t>& table_offsets,
                              int64_t pass_rows, int64_t query_rows) {
  std::vector<Pass> passes(1);
  for (size_t i = 0; i < prefill.size(); ++i) {
    const AttentionSeq& s = prefill[i];
    const int64_t len = s.start_pos + s.num_tokens;
    for (int64_t c0 = 0; c0 < len;) {
      const int64_t c1 = std::min(len, c0 + pass_rows);
      if (passes.back().rows + (c1 - c0) > pass_rows) passes.emplace_back();
      Pass& p = passes.back();
      const int32_t flags = (c0 == 0 ? kChunkFirst : 0) | (c1 == len ? kChunkLast : 0);
      p.chunks.push_back({i32(s.token_begin), i32(s.num_tokens), i32(s.start_pos), i32(c0), i32(c1), i32(p.rows),
                          table_offsets[i], flags});
      p.rows += c1 - c0;
      p.max_chunk_rows = std::max(p.max_chunk_rows, c1 - c0);
      c0 = c1;
    }
  }
  for (Pass& p : passes) {
    std::vector<std::pair<int64_t, PrefillTile>> weighted;
    for (size_t c = 0; c < p.chunks.size(); ++c) {
      const PrefillChunk& ch = p.chunks[c];
      for (int64_t q0 = 0; q0 < ch.n_q; q0 += query_rows) {
        const int64_t last_pos = ch.start_pos + std::min<int64_t>(q0 + query_rows, ch.n_q) - 1;
        const int64_t keys = std::min<int64_t>(ch.c1, last_pos + 1) - ch.c0;
        if (keys <= 0 && !(ch.flags & kChunkLast)) continue;
        weighted.push_back({keys, {i32(static_cast<int64_t>(c)), i32(q0)}});
      }
    }
    std::stable_sort(weighted.begin(), weighted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& w : weighted) p.tiles.push_back(w.second);
  }
  return passes;
}

// kv[n, m] (row-major) = lat[n, :k] (rows ld_lat apart) · w[m, k]ᵀ with fp32 accumulation; kv is
// bf16 (the epilogue rounds, as transformers' bf16 kv_b_proj does) or fp32 (`kv_type`). In
// column-major terms: kvᵀ (m x n) = w (k x m stored, transposed) · latᵀ (k x n, ld ld_lat).
// alpha scales the product in fp32 before the output is rounded (an fp8 cache's scale).
void decompress(const MlaPrefillEnv& env, const __nv_bfloat16* w, int64_t m, int64_t k, const __nv_bfloat16* lat,
                int64_t ld_lat, int64_t n, void* kv, cudaDataType_t kv_type, float alpha) {
  cublasLtMatmulDesc_t op;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, lc;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, ld_lat));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, kv_type, m, n, m));
  cublasLtMatmulPreference_t pref;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = env.workspace_bytes;
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(env.lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
  TESSERA_CHECK(found > 0, "mla prefill: cuBLASLt has no bf16 GEMM algorithm to decompress K/V (m={} n={} k={})", m, n,
                k);
  TESSERA_CHECK(heur.workspaceSize <= env.workspace_bytes, "mla prefill: the K/V GEMM wants {} bytes of workspace",
                heur.workspaceSize);
  const float beta = 0.0f;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(env.lt, op, &alpha, w, la, lat, lb, &beta, kv, lc, kv, lc, &heur.algo,
                                      env.workspace, env.workspace_bytes, env.stream));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

void check_args(const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& d,
                std::span<const AttentionSeq> seqs, const Tensor& out) {
  const int64_t T = q.rank() > 0 ? q.dim(0) : 0, qk = d.nope + d.rope;
  TESSERA_CHECK(q.dtype() == DType::kF32 && q.numel() == T * d.heads * qk,
                "mla prefill: q {} is not fp32 [T, {} heads x {}]", core::shape_str(q.shape()), d.heads, qk);
  TESSERA_CHECK(out.dtype() == DType::kF32 && out.numel() == T * d.heads * d.v,
                "mla prefill: out {} is not fp32 [{}, {} heads x {}]", core::shape_str(out.shape()), T, d.heads, d.v);
  TESSERA_CHECK(reinterpret_cast<uintptr_t>(q.raw()) % 16 == 0 && reinterpret_cast<uintptr_t>(out.raw()) % 8 == 0,
                "mla prefill: q and out must be 16- and 8-byte aligned device memory");
  TESSERA_CHECK(kv_b.weight.dtype() == DType::kBF16 && kv_b.out == d.heads * (d.nope + d.v) && kv_b.in == d.latent,
                "mla prefill: kv_b {} [{}, {}] is not bf16 [{} heads x ({} + {}), latent {}]", kv_b.name, kv_b.out,
                kv_b.in, d.heads, d.nope, d.v, d.latent);
  TESSERA_CHECK((cache.pages.dtype() == DType::kBF16 || cache.pages.dtype() == DType::kU8) && cache.pages.rank() == 3 &&
                    cache.pages.dim(2) == d.latent + d.rope,
                "mla prefill: KV pages {} {} are not bf16 or fp8 (U8) [pages, page, {} + {}]",
                core::dtype_name(cache.pages.dtype()), core::shape_str(cache.pages.shape()), d.latent, d.rope);
  TESSERA_CHECK(cache.pages.dtype() != DType::kU8 || (std::isfinite(cache.scale) && cache.scale > 0.0f),
                "mla prefill: the fp8 KV cache scale {} is not a positive finite number", cache.scale);
  TESSERA_CHECK(T < std::numeric_limits<int32_t>::max() / 2, "mla prefill: {} tokens in one step is too many", T);
  const int64_t num_pages = cache.pages.dim(0), page = cache.page_size;
  for (const auto& s : seqs) {
    TESSERA_CHECK(s.token_begin >= 0 && s.num_tokens >= 0 && s.start_pos >= 0 && s.token_begin + s.num_tokens <= T,
                  "mla prefill: sequence rows [{}, {}) are outside the step's {} tokens", s.token_begin,
                  s.token_begin + s.num_tokens, T);
    const int64_t len = s.start_pos + s.num_tokens;
    TESSERA_CHECK(len < std::numeric_limits<int32_t>::max() / 2, "mla prefill: context of {} tokens is too long", len);
    TESSERA_CHECK(static_cast<int64_t>(s.block_table.size()) * page >= len,
                  "mla prefill: block table of {} pages cannot hold {} tokens", s.block_table.size(), len);
    for (int64_t b = 0; b < (len + page - 1) / page; ++b)
      TESSERA_CHECK(s.block_table[b] >= 0 && s.block_table[b] < num_pages,
                    "mla prefill: page id {} out of range [0, {})", s.block_table[b], num_pages);
  }
}

void run_prefill(const MlaPrefillEnv& env, const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                 const MlaDims& d, std::span<const AttentionSeq> prefill, bool split, Tensor& out) {
  std::vector<int32_t> plan, table_offsets;
  for (const auto& s : prefill) {
    table_offsets.push_back(i32(static_cast<int64_t>(plan.size())));
    const int64_t pages = (s.start_pos + s.num_tokens + cache.page_size - 1) / cache.page_size;
    plan.insert(plan.end(), s.block_table.begin(), s.block_table.begin() + pages);
  }
  // Read each step, as the other settings here (tests switch them between steps).
  const bool wgmma = mla_prefill_uses_wgmma(core::env_flag("TESSERA_MLA_PREFILL_WGMMA"), split, d, env.sm90a);
  const int64_t query_rows = wgmma ? 128 : mla_prefill_query_rows(split, mla_prefill_query_rows_setting());
  std::vector<Pass> passes = plan_passes(prefill, table_offsets, mla_prefill_pass_rows(d, split), query_rows);
  bool carries_state = false;
  int64_t buf_rows = 0;
  for (Pass& p : passes) {
    buf_rows = std::max(buf_rows, p.rows);
    for (const auto& ch : p.chunks) carries_state |= ch.flags != (kChunkFirst | kChunkLast);
    static_assert(sizeof(PrefillChunk) % 4 == 0 && sizeof(PrefillTile) % 4 == 0);
    p.chunk_at = plan.size();
    plan.resize(plan.size() + p.chunks.size() * sizeof(PrefillChunk) / 4);
    std::memcpy(plan.data() + p.chunk_at, p.chunks.data(), p.chunks.size() * sizeof(PrefillChunk));
    p.tile_at = plan.size();
    plan.resize(plan.size() + p.tiles.size() * sizeof(PrefillTile) / 4);
    std::memcpy(plan.data() + p.tile_at, p.tiles.data(), p.tiles.size() * sizeof(PrefillTile));
  }
  Tensor d_plan = env.upload(DType::kI32, {static_cast<int64_t>(plan.size())}, plan.data());
  const int64_t entry = d.latent + d.rope, kv_width = d.heads * (d.nope + d.v), T = q.dim(0);
  Tensor lat = env.alloc(DType::kBF16, {buf_rows, entry});
  Tensor kv = env.alloc(DType::kBF16, {buf_rows, kv_width});
  // Split precision: the GEMM's fp32 output, cut into hi (kv) and lo.
  Tensor kv_f32 = split ? env.alloc(DType::kF32, {buf_rows, kv_width}) : Tensor();
  Tensor kv_lo = split ? env.alloc(DType::kBF16, {buf_rows, kv_width}) : Tensor();
  Tensor ml = carries_state ? env.alloc(DType::kF32, {T, d.heads, 2}) : Tensor();

  // An fp8 cache is gathered as its exact bf16 values q; its scale multiplies the K/V GEMM (alpha)
  // and q's rope part, which meets the unscaled k_pe in `lat`: all in fp32, nothing rounded twice.
  const bool fp8 = cache.pages.dtype() == DType::kU8;
  const float kv_scale = fp8 ? cache.scale : 1.0f;
  const int32_t* base = d_plan.data<int32_t>();
  for (const Pass& p : passes) {
    const auto* chunks = reinterpret_cast<const PrefillChunk*>(base + p.chunk_at);
    if (fp8)
      launch_mla_gather_latents_fp8(cache.pages.data<uint8_t>(), cache.page_size, entry, base, chunks,
                                    static_cast<int64_t>(p.chunks.size()), p.max_chunk_rows, lat.data<__nv_bfloat16>(),
                                    env.stream);
    else
      launch_mla_gather_latents(cache.pages.data<__nv_bfloat16>(), cache.page_size, entry, base, chunks,
                                static_cast<int64_t>(p.chunks.size()), p.max_chunk_rows, lat.data<__nv_bfloat16>(),
                                env.stream);
    TESSERA_CUDA_CHECK_LAUNCH();
    if (split) {
      decompress(env, kv_b.weight.data<__nv_bfloat16>(), kv_width, d.latent, lat.data<__nv_bfloat16>(), entry, p.rows,
                 kv_f32.raw(), CUDA_R_32F, kv_scale);
      launch_split_bf16(kv_f32.data<float>(), p.rows * kv_width, kv.data<__nv_bfloat16>(), kv_lo.data<__nv_bfloat16>(),
                        env.stream);
      TESSERA_CUDA_CHECK_LAUNCH();
    } else {
      decompress(env, kv_b.weight.data<__nv_bfloat16>(), kv_width, d.latent, lat.data<__nv_bfloat16>(), entry, p.rows,
                 kv.raw(), CUDA_R_16BF, kv_scale);
    }
    PrefillAttendArgs a{q.data<float>(),
                        lat.data<__nv_bfloat16>(),
                        kv.data<__nv_bfloat16>(),
                        split ? kv_lo.data<__nv_bfloat16>() : nullptr,
                        split,
                        chunks,
                        reinterpret_cast<const PrefillTile*>(base + p.tile_at),
                        out.data<float>(),
                        carries_state ? ml.data<float>() : nullptr,
                        static_cast<int>(d.heads),
                        static_cast<int>(d.nope),
                        static_cast<int>(d.rope),
                        static_cast<int>(d.v),
                        static_cast<int>(d.latent),
                        d.scale,
                        kv_scale,
                        static_cast<int>(query_rows)};
    if (wgmma)
      launch_mla_prefill_attend_wgmma(a, static_cast<int64_t>(p.tiles.size()), env.stream);
    else
      launch_mla_prefill_attend(a, static_cast<int64_t>(p.tiles.size()), env.stream);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool mla_prefill_split_precision(int64_t context) {
  const std::string v = core::env_value("TESSERA_MLA_PREFILL_PRECISION").value_or("auto");
  TESSERA_CHECK(v == "split" || v == "bf16" || v == "auto",
                "TESSERA_MLA_PREFILL_PRECISION='{}': expected split, bf16 or auto", v);
  return v == "split" || (v == "auto" && context <= kMlaPrefillSplitMaxContext);
}

bool mla_prefill_uses_wgmma(bool wanted, bool split, const MlaDims& d, bool sm90a) {
  return wanted && !split && sm90a && mla_prefill_wgmma_shape(d.nope, d.rope, d.v) && d.latent % 8 == 0;
}

int64_t mla_prefill_query_rows_setting() {
  const std::string v = core::env_value("TESSERA_MLA_PREFILL_QUERY_ROWS").value_or("128");
  TESSERA_CHECK(v == "64" || v == "128", "TESSERA_MLA_PREFILL_QUERY_ROWS='{}': expected 64 or 128", v);
  return v == "128" ? 128 : 64;
}

int64_t mla_prefill_pass_rows(const MlaDims& d, bool split) {
  if (const auto env = core::env_value("TESSERA_MLA_PREFILL_PASS_ROWS")) {
    const char* v = env->c_str();
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    TESSERA_CHECK(end != v && *end == '\0' && n >= 1,
                  "TESSERA_MLA_PREFILL_PASS_ROWS='{}': expected a positive number of context positions", v);
    return n;
  }
  // K/V bytes a context position takes: bf16, or fp32 + hi + lo.
  const int64_t row_bytes = d.heads * (d.nope + d.v) * (split ? 8 : 2);
  return std::max<int64_t>(kMinPassRows, kPassKvBytes / std::max<int64_t>(row_bytes, 1));
}

void run_mla_prefill_step(const MlaPrefillEnv& env, const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b,
                          const MlaDims& d, std::span<const AttentionSeq> seqs, Tensor& out,
                          const MlaDecodeFn& decode) {
  TESSERA_CHECK(mla_prefill_attend_supported(d.nope, d.rope, d.v, d.latent),
                "mla prefill: head dims nope {} + rope {}, v {}, latent {} are not supported (qk <= 192, v <= 128, "
                "multiples of 8)",
                d.nope, d.rope, d.v, d.latent);
  check_args(q, cache, kv_b, d, seqs, out);
  std::vector<AttentionSeq> prefill, decode_seqs;
  std::vector<int64_t> decode_rows;
  for (const auto& s : seqs) {
    if (s.num_tokens > 1) prefill.push_back(s);
    if (s.num_tokens != 1) continue;
    decode_seqs.push_back({static_cast<int64_t>(decode_rows.size()), 1, s.start_pos, s.block_table});
    decode_rows.push_back(s.token_begin);
  }
  if (!prefill.empty()) {
    int64_t context = 0;
    for (const auto& s : prefill) context = std::max(context, s.start_pos + s.num_tokens);
    run_prefill(env, q, cache, kv_b, d, prefill, mla_prefill_split_precision(context), out);
  }
  if (decode_rows.empty()) return;

  // Decode tokens: compact their rows of q, run the caller's absorbed path, put the rows back.
  const int64_t n = static_cast<int64_t>(decode_rows.size()), T = q.dim(0);
  const int64_t q_width = q.numel() / T, out_width = out.numel() / T;
  Tensor d_rows = env.upload(DType::kI64, {n}, decode_rows.data());
  Tensor qd = env.alloc(DType::kF32, {n, q_width}), od = env.alloc(DType::kF32, {n, out_width});
  launch_gather_rows(q.data<float>(), q_width, d_rows.data<int64_t>(), n, qd.data<float>(), env.stream);
  TESSERA_CUDA_CHECK_LAUNCH();
  decode(qd, decode_seqs, od);
  launch_scatter_rows(od.data<float>(), out_width, d_rows.data<int64_t>(), n, out.data<float>(), env.stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::ops::cuda
