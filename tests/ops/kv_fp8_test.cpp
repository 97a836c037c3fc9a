// The CPU backend's fp8 e4m3 KV cache (ops::KvLayerView): kv_cache_write stores
// sat_e4m3_rne(x / scale) bytes where the block table says; mla_attention (decode and prefill)
// reads q · scale. Checked three ways: the bytes, exact agreement with an fp32 cache holding the
// dequantized values, and closeness to the unquantized fp32 cache within what 3 mantissa bits allow.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "model/golden_util.h"
#include "ops/cpu/cpu_ops.h"

namespace tessera {
namespace {

using core::DType;
using core::Tensor;

// Tolerance of fp8 vs fp32 cache attention outputs (rel_rms). An e4m3 value keeps 4 significant
// bits: a stored element is off by at most half an ulp, 2^-4 of its magnitude, and by ~2^-4/sqrt(3)
// ≈ 0.036 rms over random mantissas. The output is a softmax-weighted mean of the latents (then
// linear through W_UV), so value errors carry over at most at that size, and the scores' errors
// (q · δk) move the weights by a comparable relative amount at these O(1) scores: measured
// 0.030-0.039 here. The bound is the worst single-element error, 2^-4; a saturating or unscaled
// cache is off by an order of magnitude more (ScaleLetsValuesBeyond448Fit: 0.74).
constexpr double kFp8Tol = 0.0625;
// Below this the "fp8" path did not quantize at all (3-bit mantissas cannot be this close).
constexpr double kFp8MinErr = 1.0 / 1024;

struct Shape {
  int64_t heads, nope, rope, v, latent;
};

class KvFp8Test : public ::testing::Test {
 protected:
  std::vector<float> random(int64_t n, float sd) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng_);
    return v;
  }
  Tensor tensor(core::Shape s, const std::vector<float>& v) { return cpu_.from_host_f32(std::move(s), v.data()); }
  // A bf16 kv_b [heads * (nope + v), latent] the CPU reads as it is.
  ops::LinearWeight kv_b(const Shape& d) {
    const int64_t out = d.heads * (d.nope + d.v);
    auto v = random(out * d.latent, 0.1f);
    bits_.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits_[i] = core::f32_to_bf16(v[i]);
    ops::LinearWeight w;
    w.out = out;
    w.in = d.latent;
    w.name = "kv_b";
    w.weight = Tensor::view(DType::kBF16, {out, d.latent}, bits_.data());
    return w;
  }

  // A ragged step over shuffled pages: decode tokens at several context lengths (partial pages,
  // several pages) and prefill chunks with and without a cached prefix.
  struct Step {
    std::vector<std::vector<int32_t>> tables;
    std::vector<ops::AttentionSeq> prefix, step;  // writes of the cached prefixes; the step itself
    std::vector<std::vector<float>> prefix_latents;
    std::vector<float> latents, q;
    int64_t pages = 0, T = 0;
  };
  Step make_step(const Shape& d, float latent_sd) {
    struct Seq {
      int64_t cached, fresh;
    };
    const std::vector<Seq> seqs = {{0, 5}, {70, 1}, {3, 40}, {0, 1}, {128, 1}, {31, 1}};
    const int64_t entry = d.latent + d.rope;
    Step s;
    for (const auto& q : seqs) s.pages += (q.cached + q.fresh + kPage - 1) / kPage;
    std::vector<int32_t> order(static_cast<size_t>(s.pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    size_t next = 0;
    for (const auto& q : seqs) {
      std::vector<int32_t> t;
      for (int64_t p = 0; p < (q.cached + q.fresh + kPage - 1) / kPage; ++p) t.push_back(order[next++]);
      s.tables.push_back(t);
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      s.prefix.push_back({0, seqs[i].cached, 0, s.tables[i]});
      s.prefix_latents.push_back(random(seqs[i].cached * entry, latent_sd));
      s.step.push_back({s.T, seqs[i].fresh, seqs[i].cached, s.tables[i]});
      s.T += seqs[i].fresh;
    }
    s.latents = random(s.T * entry, latent_sd);
    s.q = random(s.T * d.heads * (d.nope + d.rope), 1.0f);
    return s;
  }
  // Writes the step's latents into `cache` and returns the attention output.
  std::vector<float> run(const Shape& d, const Step& s, ops::KvLayerView& cache, const ops::LinearWeight& w) {
    const int64_t entry = d.latent + d.rope;
    for (size_t i = 0; i < s.prefix.size(); ++i)
      if (s.prefix[i].num_tokens > 0)
        cpu_.kv_cache_write(cache, tensor({s.prefix[i].num_tokens, entry}, s.prefix_latents[i]),
                            std::span(&s.prefix[i], 1));
    cpu_.kv_cache_write(cache, tensor({s.T, entry}, s.latents), s.step);
    ops::MlaDims dims{d.heads, d.nope, d.rope, d.v, d.latent, 1.0f / std::sqrt(static_cast<float>(d.nope + d.rope))};
    Tensor out = cpu_.empty({s.T, d.heads * d.v});
    cpu_.mla_attention(tensor({s.T, d.heads * (d.nope + d.rope)}, s.q), cache, w, dims, s.step, out);
    return cpu_.to_host_f32(out);
  }

  static constexpr int64_t kPage = 64;
  std::mt19937_64 rng_{1234};
  std::vector<uint16_t> bits_;
  ops::cpu::CpuOps cpu_;
};

TEST_F(KvFp8Test, BackendOffersFp8ButDefaultsToFp32) {
  const auto s = cpu_.supported_kv_dtypes();
  EXPECT_NE(std::find(s.begin(), s.end(), core::KvCacheDtype::kFp8E4M3), s.end());
  EXPECT_EQ(cpu_.default_kv_dtype(), core::KvCacheDtype::kF32);
  Tensor p = cpu_.empty_kv_pages({2, kPage, 48}, core::KvCacheDtype::kFp8E4M3);
  EXPECT_EQ(p.dtype(), DType::kU8);
  EXPECT_EQ(p.nbytes(), static_cast<size_t>(2 * kPage * 48));
  EXPECT_THROW(cpu_.empty_kv_pages({2, kPage, 48}, core::KvCacheDtype::kBF16), core::Error);
}

TEST_F(KvFp8Test, WriteStoresScaledE4M3BytesInTheTableSlots) {
  const int64_t entry = 48;
  for (float scale : {1.0f, 0.37f, 3.0f}) {
    ops::KvLayerView cache{cpu_.empty_kv_pages({3, kPage, entry}, core::KvCacheDtype::kFp8E4M3), kPage, scale};
    std::vector<int32_t> table = {2, 0};     // positions 0..63 on page 2, 64.. on page 0
    ops::AttentionSeq seq{0, 4, 62, table};  // positions 62, 63, 64, 65: across a page boundary
    auto x = random(4 * entry, 50.0f);
    x[0] = 1e6f;  // saturates to 448 · scale
    x[1] = -1e6f;
    cpu_.kv_cache_write(cache, tensor({4, entry}, x), std::span(&seq, 1));
    const uint8_t* bytes = cache.pages.data<uint8_t>();
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t pos = 62 + t, row = table[static_cast<size_t>(pos / kPage)] * kPage + pos % kPage;
      for (int64_t j = 0; j < entry; ++j)
        ASSERT_EQ(bytes[row * entry + j], core::f32_to_fp8_e4m3(x[static_cast<size_t>(t * entry + j)] / scale))
            << "scale " << scale << " token " << t << " element " << j;
    }
    EXPECT_EQ(bytes[(2 * kPage + 62) * entry + 0], 0x7e);
    EXPECT_EQ(bytes[(2 * kPage + 62) * entry + 1], 0xfe);
    // Page 1 was never written: still zero.
    for (int64_t i = 0; i < kPage * entry; ++i) ASSERT_EQ(bytes[kPage * entry + i], 0) << i;
  }
}

TEST_F(KvFp8Test, BadScaleIsAnErrorNamingTheOp) {
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    ops::KvLayerView cache{cpu_.empty_kv_pages({1, kPage, 8}, core::KvCacheDtype::kFp8E4M3), kPage, bad};
    std::vector<int32_t> table = {0};
    ops::AttentionSeq seq{0, 1, 0, table};
    try {
      cpu_.kv_cache_write(cache, tensor({1, 8}, random(8, 1.0f)), std::span(&seq, 1));
      FAIL() << "scale " << bad;
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("kv_cache_write"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("scale"), std::string::npos) << e.what();
    }
  }
}

// The fp8 cache must read back exactly q · scale: attention over it equals attention over an fp32
// cache holding those dequantized values (same arithmetic after the gather), decode and prefill.
TEST_F(KvFp8Test, AttentionReadsExactlyTheDequantizedValues) {
  for (const Shape& d : {Shape{8, 16, 16, 24, 32}, Shape{4, 128, 64, 128, 512}}) {
    for (float scale : {1.0f, 0.8125f, 6.0f}) {
      SCOPED_TRACE("latent " + std::to_string(d.latent) + " scale " + std::to_string(scale));
      const int64_t entry = d.latent + d.rope;
      Step s = make_step(d, 2.0f * scale);
      auto w = kv_b(d);
      ops::KvLayerView fp8{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kFp8E4M3), kPage, scale};
      const auto got = run(d, s, fp8, w);
      // The same step with every latent replaced by its dequantized value, in fp32.
      auto deq = [&](std::vector<float> v) {
        for (auto& x : v) x = core::fp8_e4m3_to_f32(core::f32_to_fp8_e4m3(x / scale)) * scale;
        return v;
      };
      Step e = s;
      for (auto& p : e.prefix_latents) p = deq(p);
      e.latents = deq(e.latents);
      ops::KvLayerView f32{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kF32), kPage};
      const auto want = run(d, e, f32, w);
      EXPECT_LE(test::rel_rms(got, want), 1e-6);
    }
  }
}

TEST_F(KvFp8Test, AttentionCloseToTheFp32CacheWithinE4M3Precision) {
  for (const Shape& d : {Shape{8, 16, 16, 24, 32}, Shape{4, 128, 64, 128, 512}, Shape{20, 32, 16, 32, 64}}) {
    SCOPED_TRACE("latent " + std::to_string(d.latent));
    const int64_t entry = d.latent + d.rope;
    Step s = make_step(d, 1.0f);
    auto w = kv_b(d);
    ops::KvLayerView f32{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kF32), kPage};
    ops::KvLayerView fp8{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kFp8E4M3), kPage};
    const auto ref = run(d, s, f32, w), got = run(d, s, fp8, w);
    const double err = test::rel_rms(got, ref);
    std::printf("  latent %ld: fp8 vs fp32 cache rel_rms %.4g\n", static_cast<long>(d.latent), err);
    EXPECT_LE(err, kFp8Tol);
    EXPECT_GE(err, kFp8MinErr) << "the fp8 cache did not quantize";
  }
}

// Latents far beyond e4m3's ±448 fit thanks to the scale: with scale 8 the output stays within the
// fp8 tolerance, with scale 1 the same values saturate and the output is far off.
TEST_F(KvFp8Test, ScaleLetsValuesBeyond448Fit) {
  const Shape d{8, 16, 16, 24, 32};
  const int64_t entry = d.latent + d.rope;
  Step s = make_step(d, 1000.0f);  // |x| up to ~4000
  // Keep the scores moderate: the latents are large, so scale q down.
  for (auto& x : s.q) x *= 1e-3f;
  auto w = kv_b(d);
  ops::KvLayerView f32{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kF32), kPage};
  const auto ref = run(d, s, f32, w);
  ops::KvLayerView scaled{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kFp8E4M3), kPage, 10.0f};
  const double err_scaled = test::rel_rms(run(d, s, scaled, w), ref);
  ops::KvLayerView unscaled{cpu_.empty_kv_pages({s.pages, kPage, entry}, core::KvCacheDtype::kFp8E4M3), kPage, 1.0f};
  const double err_unscaled = test::rel_rms(run(d, s, unscaled, w), ref);
  std::printf("  |x| ~ 1000: scale 10 rel_rms %.4g, scale 1 (saturating) rel_rms %.4g\n", err_scaled, err_unscaled);
  EXPECT_LE(err_scaled, kFp8Tol);
  EXPECT_GT(err_unscaled, 0.3);
}

}  // namespace
}  // namespace tessera
