// MLA attention on the CPU (spec §2.7 and §4): prefill through K/V decompressed from the latent
// cache, decode in the absorbed form over the latent cache itself.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

// In-place softmax over n >= 1 scores (p then sums to 1); returns the log-sum-exp of the scores.
float softmax(float* p, int64_t n) {
  float m = *std::max_element(p, p + n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (p[i] = std::exp(p[i] - m));
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
  return m + std::log(sum);
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

// Absorbed attention of one head's query [q_lat | q_pe] over the first `visible` (>= 1) entries of
// ctx [visible, latent + rope]: o_lat (normalised) = Σ_p softmax_p · c_kv[p]; returns the
// log-sum-exp of the scaled scores. `scores` holds at least `visible` floats.
float attend_latent(const float* q_lat, const float* q_pe, const float* ctx, int64_t visible, const MlaDims& d,
                    float* scores, float* o_lat) {
  const int64_t entry = d.latent + d.rope;
  for (int64_t p = 0; p < visible; ++p) {
    const float* c = ctx + p * entry;
    scores[p] = (dot(q_lat, c, d.latent) + dot(q_pe, c + d.latent, d.rope)) * d.scale;
  }
  const float lse = softmax(scores, visible);
  std::fill(o_lat, o_lat + d.latent, 0.0f);
  for (int64_t p = 0; p < visible; ++p) {
    const float* c = ctx + p * entry;
    for (int64_t l = 0; l < d.latent; ++l) o_lat[l] += scores[p] * c[l];
  }
  return lse;
}

// q_lat = q_nope · W_UK (the key up-projection absorbed into the query); w_uk [nope, latent].
void absorb_query(const float* q_nope, const float* w_uk, const MlaDims& d, float* q_lat) {
  std::fill(q_lat, q_lat + d.latent, 0.0f);
  for (int64_t i = 0; i < d.nope; ++i)
    for (int64_t l = 0; l < d.latent; ++l) q_lat[l] += q_nope[i] * w_uk[i * d.latent + l];
}

// o[j] = W_UV[j] · o_lat (the value up-projection applied after attention); w_uv [v, latent].
void up_project(const float* o_lat, const float* w_uv, const MlaDims& d, float* o) {
  for (int64_t j = 0; j < d.v; ++j) o[j] = dot(w_uv + j * d.latent, o_lat, d.latent);
}

void decode_absorbed(const Tensor& q, const std::vector<float>& ctx, int64_t len, const std::vector<float>& wkvb,
                     const MlaDims& d, const AttentionSeq& s, Tensor& out) {
  const int64_t qk = d.nope + d.rope, kvw = d.nope + d.v;
  core::parallel_for(d.heads * s.num_tokens, [&](int64_t b, int64_t e) {
    std::vector<float> q_lat(static_cast<size_t>(d.latent)), o_lat(static_cast<size_t>(d.latent)),
        scores(static_cast<size_t>(len));
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job / s.num_tokens, t = job % s.num_tokens;
      const int64_t visible = s.start_pos + t + 1;
      const float* qv = q.data<float>() + ((s.token_begin + t) * d.heads + h) * qk;
      const float* w_uk = wkvb.data() + h * kvw * d.latent;  // [nope, latent]
      const float* w_uv = w_uk + d.nope * d.latent;          // [v, latent]
      absorb_query(qv, w_uk, d, q_lat.data());
      attend_latent(q_lat.data(), qv + d.nope, ctx.data(), visible, d, scores.data(), o_lat.data());
      up_project(o_lat.data(), w_uv, d, out.data<float>() + (s.token_begin + t) * d.heads * d.v + h * d.v);
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

namespace {
void check_kv_b(const LinearWeight& kv_b, const MlaDims& d, const char* op) {
  TESSERA_CHECK(kv_b.out == d.heads * (d.nope + d.v) && kv_b.in == d.latent,
                "{}: kv_b [{}, {}] does not fit {} heads x ({} + {}) x latent {}", op, kv_b.out, kv_b.in, d.heads,
                d.nope, d.v, d.latent);
}
}  // namespace

void CpuOps::mla_absorb_q(const Tensor& q, const LinearWeight& kv_b, const MlaDims& d, Tensor& q_full) {
  check_kv_b(kv_b, d, "mla_absorb_q");
  const int64_t T = q.dim(0), qk = d.nope + d.rope, entry = d.latent + d.rope, kvw = d.nope + d.v;
  TESSERA_CHECK(q.numel() == T * d.heads * qk && q_full.numel() == T * d.heads * entry,
                "mla_absorb_q: q {} and q_full {} do not fit {} tokens of {} heads", core::shape_str(q.shape()),
                core::shape_str(q_full.shape()), T, d.heads);
  const std::vector<float> wkvb = dequant_kv_b(kv_b);
  core::parallel_for(T * d.heads, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      const int64_t h = job % d.heads;
      const float* qv = q.data<float>() + job * qk;
      float* dst = q_full.data<float>() + job * entry;
      absorb_query(qv, wkvb.data() + h * kvw * d.latent, d, dst);
      std::copy(qv + d.nope, qv + qk, dst + d.latent);
    }
  });
}

void CpuOps::mla_attend_latent(const Tensor& q_full, const KvLayerView& cache, const MlaDims& d,
                               std::span<const AttentionSeq> seqs, bool /*decode_step: one exact path*/, Tensor& o_lat,
                               Tensor& lse) {
  const int64_t T = q_full.dim(0), entry = d.latent + d.rope;
  TESSERA_CHECK(
      q_full.numel() == T * d.heads * entry && o_lat.numel() == T * d.heads * d.latent && lse.numel() == T * d.heads,
      "mla_attend_latent: q_full {}, o_lat {} and lse {} do not fit {} tokens of {} heads, latent {} + {}",
      core::shape_str(q_full.shape()), core::shape_str(o_lat.shape()), core::shape_str(lse.shape()), T, d.heads,
      d.latent, d.rope);
  TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == entry,
                "mla_attend_latent: KV pages {} do not hold entries of latent {} + rope {}",
                core::shape_str(cache.pages.shape()), d.latent, d.rope);
  kv_is_fp8(cache, "mla_attend_latent");
  TESSERA_CHECK(static_cast<int64_t>(seqs.size()) == T, "mla_attend_latent: {} sequences for {} tokens (one a token)",
                seqs.size(), T);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    TESSERA_CHECK(s.num_tokens == 1 && s.start_pos >= -1 && s.token_begin == static_cast<int64_t>(i),
                  "mla_attend_latent: sequence {} has {} tokens at row {}, position {} (one token a sequence, in row "
                  "order, position >= -1)",
                  i, s.num_tokens, s.token_begin, s.start_pos);
    const int64_t visible = s.start_pos + 1;
    float* o = o_lat.data<float>() + s.token_begin * d.heads * d.latent;
    float* l = lse.data<float>() + s.token_begin * d.heads;
    if (visible == 0) {
      std::fill(o, o + d.heads * d.latent, 0.0f);
      std::fill(l, l + d.heads, -std::numeric_limits<float>::infinity());
      continue;
    }
    const std::vector<float> ctx = gather_context(cache, s, visible);
    core::parallel_for(d.heads, [&](int64_t b, int64_t e) {
      std::vector<float> scores(static_cast<size_t>(visible));
      for (int64_t h = b; h < e; ++h) {
        const float* qv = q_full.data<float>() + (s.token_begin * d.heads + h) * entry;
        l[h] = attend_latent(qv, qv + d.latent, ctx.data(), visible, d, scores.data(), o + h * d.latent);
      }
    });
  }
}

void CpuOps::mla_rank_weigh(Tensor& o_lat, const Tensor& lse, const Tensor& lse_all) {
  const int64_t T = lse.dim(0), heads = lse.numel() / std::max<int64_t>(T, 1);
  const int64_t ranks = T > 0 ? lse_all.numel() / (T * heads) : 0, latent = T > 0 ? o_lat.numel() / (T * heads) : 0;
  TESSERA_CHECK(T == 0 || (lse_all.numel() == T * heads * ranks && ranks >= 1 && o_lat.numel() == T * heads * latent),
                "mla_rank_weigh: o_lat {}, lse {} and lse_all {} do not fit one another",
                core::shape_str(o_lat.shape()), core::shape_str(lse.shape()), core::shape_str(lse_all.shape()));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* all = lse_all.data<float>() + t * ranks * heads + h;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t r = 0; r < ranks; ++r) m = std::max(m, all[r * heads]);
      const float own = lse.data<float>()[t * heads + h];
      float f = 0.0f;
      if (own != -std::numeric_limits<float>::infinity()) {
        float sum = 0.0f;
        for (int64_t r = 0; r < ranks; ++r) sum += std::exp(all[r * heads] - m);
        f = std::exp(own - (m + std::log(sum)));
      }
      float* o = o_lat.data<float>() + (t * heads + h) * latent;
      for (int64_t l = 0; l < latent; ++l) o[l] *= f;
    }
}

void CpuOps::mla_up_v(const Tensor& o_lat, int64_t head_begin, const LinearWeight& kv_b, const MlaDims& d,
                      Tensor& out) {
  check_kv_b(kv_b, d, "mla_up_v");
  const int64_t T = out.dim(0), kvw = d.nope + d.v;
  const int64_t all_heads = T > 0 ? o_lat.numel() / (T * d.latent) : 0;
  TESSERA_CHECK(out.numel() == T * d.heads * d.v && o_lat.numel() == T * all_heads * d.latent && head_begin >= 0 &&
                    head_begin + d.heads <= all_heads,
                "mla_up_v: o_lat {} has no heads [{}, {}) of latent {} for out {}", core::shape_str(o_lat.shape()),
                head_begin, head_begin + d.heads, d.latent, core::shape_str(out.shape()));
  const std::vector<float> wkvb = dequant_kv_b(kv_b);
  core::parallel_for(T * d.heads, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      const int64_t t = job / d.heads, h = job % d.heads;
      up_project(o_lat.data<float>() + (t * all_heads + head_begin + h) * d.latent,
                 wkvb.data() + (h * kvw + d.nope) * d.latent, d, out.data<float>() + job * d.v);
    }
  });
}

}  // namespace tessera::ops::cpu
