// MLA attention on the CPU (spec §2.7 and §4): prefill through K/V decompressed from the latent
// cache, decode in the absorbed form over the latent cache itself.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace tessera::ops::cpu {

using core::Tensor;

namespace {

// Copies positions [0, len) of one sequence's cache into a contiguous fp32 [len, entry] buffer
// (an fp8 cache is dequantized here, so everything after it is the same for both formats).
std::vector<float> gather_context(const KvLayerView& cache, const AttentionSeq& s, int64_t len) {
  const int64_t entry = cache.pages.dim(2), page = cache.page_size;
  std::vector<float> ctx(static_cast<size_t>(len * entry));
  for (int64_t pos = 0; pos < len; ++pos) {
    const size_t block = static_cast<size_t>(pos / page);
    TESSERA_CHECK(block < s.block_table.size(), "mla_attention: position {} has no page in the block table", pos);
    const int64_t page_id = s.block_table[block];
    TESSERA_CHECK(page_id >= 0 && page_id < cache.pages.dim(0), "mla_attention: page id {} out of range", page_id);
    read_kv_entry(cache, page_id * page + pos % page, ctx.data() + pos * entry);
  }
  return ctx;
}

// In-place softmax over n scores; returns nothing, p sums to 1.
void softmax(float* p, int64_t n) {
  float m = *std::max_element(p, p + n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (p[i] = std::exp(p[i] - m));
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

void prefill(const Tensor& q, const std::vector<float>& ctx, int64_t len, const LinearWeight& kv_b, const MlaDims& d,
             const AttentionSeq& s, Tensor& out, CpuOps& ops) {
  const int64_t entry = d.latent + d.rope, qk = d.nope + d.rope, kvw = d.nope + d.v;
  // Decompress per-head k_nope and v for the whole context: kv = c_kv · kv_bᵀ.
  Tensor latent = ops.empty({len, d.latent});
  for (int64_t p = 0; p < len; ++p)
    std::memcpy(latent.data<float>() + p * d.latent, ctx.data() + p * entry, static_cast<size_t>(d.latent) * 4);
  Tensor kv = ops.empty({len, d.heads * kvw});
  ops.linear(latent, kv_b, kv);
  core::parallel_for(d.heads * s.num_tokens, [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(len));
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / s.num_tokens, t = job % s.num_tokens;
      const int64_t visible = s.start_pos + t + 1;  // causal, absolute positions
      const float* qv = q.data<float>() + ((s.token_begin + t) * d.heads + h) * qk;
      for (int64_t p = 0; p < visible; ++p) {
        const float* k_nope = kv.data<float>() + (p * d.heads + h) * kvw;
        const float* k_pe = ctx.data() + p * entry + d.latent;
        scores[p] = (dot(qv, k_nope, d.nope) + dot(qv + d.nope, k_pe, d.rope)) * d.scale;
      }
      softmax(scores.data(), visible);
      float* o = out.data<float>() + (s.token_begin + t) * d.heads * d.v + h * d.v;
      std::fill(o, o + d.v, 0.0f);
      for (int64_t p = 0; p < visible; ++p) {
        const float* v = kv.data<float>() + (p * d.heads + h) * kvw + d.nope;
        const float w = scores[p];
        for (int64_t j = 0; j < d.v; ++j) o[j] += w * v[j];
      }
    }
  });
}

// kv_b dequantized to fp32, [heads, nope + v, latent]: W_UK = rows [0, nope), W_UV = the next v rows.
std::vector<float> dequant_kv_b(const LinearWeight& kv_b) {
  std::vector<float> w(static_cast<size_t>(kv_b.out * kv_b.in));
  core::parallel_for(kv_b.out, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) kv_b.dequant_row(r, w.data() + r * kv_b.in);
  });
  return w;
}

void decode_absorbed(const Tensor& q, const std::vector<float>& ctx, int64_t len, const std::vector<float>& wkvb,
                     const MlaDims& d, const AttentionSeq& s, Tensor& out) {
  const int64_t entry = d.latent + d.rope, qk = d.nope + d.rope, kvw = d.nope + d.v;
  core::parallel_for(d.heads * s.num_tokens, [&](int64_t b, int64_t e) {
    std::vector<float> q_lat(static_cast<size_t>(d.latent)), o_lat(static_cast<size_t>(d.latent)),
        scores(static_cast<size_t>(len));
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / s.num_tokens, t = job % s.num_tokens;
      const int64_t visible = s.start_pos + t + 1;
      const float* qv = q.data<float>() + ((s.token_begin + t) * d.heads + h) * qk;
      const float* w_uk = wkvb.data() + h * kvw * d.latent;  // [nope, latent]
      const float* w_uv = w_uk + d.nope * d.latent;          // [v, latent]
      // q_lat = q_nope · W_UK  (absorb the key up-projection into the query)
      std::fill(q_lat.begin(), q_lat.end(), 0.0f);
      for (int64_t i = 0; i < d.nope; ++i)
        for (int64_t l = 0; l < d.latent; ++l) q_lat[l] += qv[i] * w_uk[i * d.latent + l];
      for (int64_t p = 0; p < visible; ++p) {
        const float* c = ctx.data() + p * entry;
        scores[p] = (dot(q_lat.data(), c, d.latent) + dot(qv + d.nope, c + d.latent, d.rope)) * d.scale;
      }
      softmax(scores.data(), visible);
      std::fill(o_lat.begin(), o_lat.end(), 0.0f);
      for (int64_t p = 0; p < visible; ++p) {
        const float* c = ctx.data() + p * entry;
        for (int64_t l = 0; l < d.latent; ++l) o_lat[l] += scores[p] * c[l];
      }
      // o = W_UV · o_lat (the value up-projection applied after attention)
      float* o = out.data<float>() + (s.token_begin + t) * d.heads * d.v + h * d.v;
      for (int64_t j = 0; j < d.v; ++j) o[j] = dot(w_uv + j * d.latent, o_lat.data(), d.latent);
    }
  });
}

}  // namespace

void CpuOps::mla_attention(const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& dims,
                           std::span<const AttentionSeq> seqs, Tensor& out) {
  TESSERA_CHECK(kv_b.out == dims.heads * (dims.nope + dims.v) && kv_b.in == dims.latent,
                "mla_attention: kv_b [{}, {}] does not fit {} heads x ({} + {}) x latent {}", kv_b.out, kv_b.in,
                dims.heads, dims.nope, dims.v, dims.latent);
  TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == dims.latent + dims.rope,
                "mla_attention: KV pages {} do not hold entries of latent {} + rope {}",
                core::shape_str(cache.pages.shape()), dims.latent, dims.rope);
  kv_is_fp8(cache, "mla_attention");
  std::vector<float> wkvb;
  for (const auto& s : seqs) {
    if (s.num_tokens == 0) continue;
    const int64_t len = s.start_pos + s.num_tokens;
    std::vector<float> ctx = gather_context(cache, s, len);
    if (s.num_tokens == 1) {
      if (wkvb.empty()) wkvb = dequant_kv_b(kv_b);
      decode_absorbed(q, ctx, len, wkvb, dims, s, out);
    } else {
      prefill(q, ctx, len, kv_b, dims, s, out, *this);
    }
  }
}

}  // namespace tessera::ops::cpu
