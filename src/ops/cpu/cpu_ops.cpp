// Elementwise ops, embedding, RMSNorm, RoPE and the dense linear of the CPU backend.
#include "ops/cpu/cpu_ops.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/thread_pool.h"

namespace tessera::ops::cpu {

using core::DType;
using core::Tensor;

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

Tensor CpuOps::empty(core::Shape shape) { return Tensor::zeros(DType::kF32, std::move(shape)); }

Tensor CpuOps::empty_i32(core::Shape shape) { return Tensor::zeros(DType::kI32, std::move(shape)); }

BackendPlan CpuOps::plan(const io::ModelConfig&, core::KvCacheDtype kv_dtype,
                         std::span<const WeightGroup> linears) const {
  BackendPlan p;
  p.device = fmt::format("cpu (fp32 reference backend, {} threads)", core::num_threads());
  p.weight_rule = "mapped from the checkpoint (not copied)";
  p.kernels.push_back({"every op", "cpu reference ops (fp32, weights dequantized row by row)",
                       fmt::format("the reference backend; KV cache {}", core::kv_cache_dtype_name(kv_dtype)), true});
  for (const WeightGroup& g : linears)
    p.kernels.push_back({fmt::format("weights: {}", g.name),
                         fmt::format("{} stored, read in place, each row dequantized exactly to fp32", g.format_name),
                         fmt::format("{} linears, {:.3f} B parameters, {}", g.linears, g.params / 1e9,
                                     core::human_bytes(g.stored_bytes)),
                         true});
  p.decode_steps = "ops run one by one on the host";
  return p;
}

Tensor CpuOps::empty_kv_pages(core::Shape shape, core::KvCacheDtype dtype) {
  TESSERA_CHECK(dtype == core::KvCacheDtype::kF32 || dtype == core::KvCacheDtype::kFp8E4M3,
                "the cpu backend stores the KV cache in fp32 or fp8_e4m3, not {}", core::kv_cache_dtype_name(dtype));
  if (dtype == core::KvCacheDtype::kFp8E4M3) return Tensor::zeros(DType::kU8, std::move(shape));
  return empty(std::move(shape));
}

bool kv_is_fp8(const KvLayerView& cache, const char* op) {
  const DType t = cache.pages.dtype();
  TESSERA_CHECK(t == DType::kF32 || t == DType::kU8, "{}: KV pages of dtype {} (the cpu backend stores F32 or U8 fp8)",
                op, core::dtype_name(t));
  if (t == DType::kF32) return false;
  TESSERA_CHECK(std::isfinite(cache.scale) && cache.scale > 0.0f,
                "{}: the fp8 KV cache scale {} is not a positive finite number", op, cache.scale);
  return true;
}

void read_kv_entry(const KvLayerView& cache, int64_t row, float* dst) {
  const int64_t entry = cache.pages.dim(2);
  if (cache.pages.dtype() == DType::kF32) {
    std::memcpy(dst, cache.pages.data<float>() + row * entry, static_cast<size_t>(entry) * 4);
    return;
  }
  const uint8_t* q = cache.pages.data<uint8_t>() + row * entry;
  for (int64_t i = 0; i < entry; ++i) dst[i] = core::fp8_e4m3_to_f32(q[i]) * cache.scale;
}

Tensor CpuOps::from_host_f32(core::Shape shape, const float* data) {
  Tensor t = empty(std::move(shape));
  std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

void CpuOps::embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t vocab = table.dim(0), hidden = table.dim(1);
  const size_t es = core::dtype_size(table.dtype());
  for (size_t t = 0; t < ids.size(); ++t) {
    TESSERA_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} at position {} is outside the vocabulary [0, {})", ids[t],
                  t, vocab);
    core::convert_to_f32(table.dtype(), table.data<uint8_t>() + static_cast<size_t>(ids[t] * hidden) * es,
                         out.data<float>() + static_cast<int64_t>(t) * hidden, static_cast<size_t>(hidden));
  }
}

void CpuOps::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t col_begin) {
  const int64_t rows = x.dim(0), width = x.dim(1), d = weight.numel(), out_width = out.dim(1);
  TESSERA_CHECK(col_begin + d <= width && (out_width == d || out_width == width) && out.dim(0) == rows,
                "rms_norm: x {} columns [{}, {}) do not fit out {}", core::shape_str(x.shape()), col_begin,
                col_begin + d, core::shape_str(out.shape()));
  std::vector<float> w(static_cast<size_t>(d));
  core::convert_to_f32(weight.dtype(), weight.raw(), w.data(), w.size());
  core::parallel_for(
      rows,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const float* xr = x.data<float>() + r * width + col_begin;
          float* yr = out_width == d ? out.data<float>() + r * d : out.data<float>() + r * out_width + col_begin;
          const float ms = dot(xr, xr, d) / static_cast<float>(d);
          const float inv = 1.0f / std::sqrt(ms + eps);
          for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
        }
      },
      16);
}

void CpuOps::linear(const Tensor& x, const LinearWeight& w, Tensor& out) {
  const int64_t rows = x.dim(0);
  TESSERA_CHECK(x.dim(1) == w.in && out.dim(1) == w.out && out.dim(0) == rows,
                "linear {}: input {} / output {} do not fit weight [{}, {}]", w.name, core::shape_str(x.shape()),
                core::shape_str(out.shape()), w.out, w.in);
  if (rows == 0) return;
  // Each output feature's weight row is dequantized once and applied to every token.
  core::parallel_for(
      w.out,
      [&](int64_t b, int64_t e) {
        std::vector<float> wrow(static_cast<size_t>(w.in));
        for (int64_t o = b; o < e; ++o) {
          w.dequant_row(o, wrow.data());
          for (int64_t t = 0; t < rows; ++t)
            out.data<float>()[t * w.out + o] = dot(x.data<float>() + t * w.in, wrow.data(), w.in);
        }
      },
      4);
}

void CpuOps::add_inplace(Tensor& x, const Tensor& y) {
  float* a = x.data<float>();
  const float* b = y.data<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) a[i] += b[i];
}

void CpuOps::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0, n = gate.numel(); i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void CpuOps::rope_inplace(Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride, int64_t count) {
  const int64_t rows = x.dim(0), width = x.numel() / std::max<int64_t>(rows, 1), half = tables.cos.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = tables.cos.data<float>() + r * half;
    const float* s = tables.sin.data<float>() + r * half;
    for (int64_t v = 0; v < count; ++v) {
      float* p = x.data<float>() + r * width + col_begin + v * col_stride;
      for (int64_t i = 0; i < half; ++i) {
        const float a = p[2 * i], b = p[2 * i + 1];
        p[2 * i] = a * c[i] - b * s[i];
        p[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

void CpuOps::kv_cache_write(KvLayerView& cache, const Tensor& latent, std::span<const AttentionSeq> seqs) {
  const int64_t entry = latent.dim(1), page = cache.page_size;
  TESSERA_CHECK(cache.pages.dim(2) == entry, "kv_cache_write: cache entry {} != latent width {}", cache.pages.dim(2),
                entry);
  const bool fp8 = kv_is_fp8(cache, "kv_cache_write");
  for (const auto& s : seqs) {
    if (s.block_table.empty()) continue;  // stored by another rank
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t pos = s.start_pos + i;
      const size_t block = static_cast<size_t>(pos / page);
      TESSERA_CHECK(block < s.block_table.size(),
                    "kv_cache_write: position {} has no page in the block table ({} pages)", pos, s.block_table.size());
      const int64_t page_id = s.block_table[block];
      TESSERA_CHECK(page_id >= 0 && page_id < cache.pages.dim(0), "kv_cache_write: page id {} out of range", page_id);
      const int64_t row = page_id * page + pos % page;
      const float* src = latent.data<float>() + (s.token_begin + i) * entry;
      if (!fp8) {
        std::memcpy(cache.pages.data<float>() + row * entry, src, static_cast<size_t>(entry) * 4);
        continue;
      }
      uint8_t* dst = cache.pages.data<uint8_t>() + row * entry;
      for (int64_t j = 0; j < entry; ++j) dst[j] = core::f32_to_fp8_e4m3(src[j] / cache.scale);
    }
  }
}

void CpuOps::gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) {
  const int64_t width = x.dim(1);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.data<float>() + static_cast<int64_t>(i) * width, x.data<float>() + rows[i] * width,
                static_cast<size_t>(width) * 4);
}

std::vector<float> CpuOps::to_host_f32(const Tensor& x) {
  return std::vector<float>(x.data<float>(), x.data<float>() + x.numel());
}

std::vector<int32_t> CpuOps::to_host_i32(const Tensor& x) {
  return std::vector<int32_t>(x.data<int32_t>(), x.data<int32_t>() + x.numel());
}

std::vector<uint8_t> CpuOps::to_host_bytes(const Tensor& x) {
  const auto* p = static_cast<const uint8_t*>(x.raw());
  return std::vector<uint8_t>(p, p + x.nbytes());
}

Tensor CpuOps::from_host_i32(core::Shape shape, const int32_t* data) {
  Tensor t = empty_i32(std::move(shape));
  std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

}  // namespace tessera::ops::cpu
