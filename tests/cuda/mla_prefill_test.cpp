// The CUDA MLA prefill path (mla_prefill.h: decompressed K/V, causal flash attention on tensor
// cores) against the CPU backend's fp32 mla_attention, through Ops::mla_attention, on ragged steps
// that mix prefill chunks with and without cached prefixes and decode tokens (which keep the
// absorbed path). Inputs are bf16-representable, so the differences left are the kernel's operand
// precision and summation order. Every precision runs (TESSERA_MLA_PREFILL_PRECISION; auto, split
// or bf16 by the step's context, held to bf16's tolerances). Skips itself without a GPU.
//
// Tolerances, rel_rms over the step / for the worst token:
//  - bf16 (q, K, V, P rounded to bf16): 1e-2 / 2.5e-2. A host emulation of the kernel's rounding
//    gives 1.7e-3 .. 3.4e-3 over the step and <= 1e-2 for the worst (token, head) at these shapes,
//    contexts up to 2k and logits up to std 3.
//  - split (bf16 hi + lo operands, three MMAs): 1e-4 / 2e-4; the emulation gives 3e-6 .. 5e-6 and
//    <= 1.5e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "model/golden_util.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/mla_prefill.h"
#include "support/require_gpu.h"

namespace tessera {
namespace {

using core::DType;
using core::Tensor;

struct Precision {
  const char* name;  // TESSERA_MLA_PREFILL_PRECISION
  double tol, token_tol;
  const char* query_rows = "64";  // TESSERA_MLA_PREFILL_QUERY_ROWS (128: the 8-warp bf16 blocks)
  const char* wgmma = "0";        // TESSERA_MLA_PREFILL_WGMMA (1: the Hopper kernel at DeepSeek-V3's dims)
};
const Precision kPrecisions[] = {{"split", 1e-4, 2e-4},
                                 {"bf16", 1e-2, 2.5e-2},
                                 {"auto", 1e-2, 2.5e-2},
                                 {"bf16", 1e-2, 2.5e-2, "128"},
                                 {"bf16", 1e-2, 2.5e-2, "64", "1"}};

struct Dims {
  int64_t heads, nope, rope, v, latent;
};
struct Seq {
  int64_t cached, fresh;  // tokens already in the cache, new tokens of the step
};

std::string name(const Dims& d) {
  return std::to_string(d.heads) + " heads, qk " + std::to_string(d.nope) + "+" + std::to_string(d.rope) + ", v " +
         std::to_string(d.v) + ", latent " + std::to_string(d.latent);
}

// Sets an environment variable for one scope (forcing several passes over the context).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      unsetenv(name_);
    else
      setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

class MlaPrefillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
    gpu_ = ops::cuda::make_cuda_ops();
  }

  std::vector<float> random(int64_t n, float scale) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = core::round_to_bf16(nd(rng_));
    return v;
  }

  // One step: every sequence's whole context [0, cached + fresh) written to a CPU (fp32) and a GPU
  // (bf16) cache over shuffled pages, a bf16 kv_b scaled so that K and V are ~unit, and q (std
  // q_scale; logits then have std ~q_scale at scale 1/sqrt(qk)).
  void build(const Dims& d, int64_t page, const std::vector<Seq>& seqs, float q_scale) {
    d_ = d;
    page_ = page;
    seqs_ = seqs;
    const int64_t entry = d.latent + d.rope;
    int64_t pages = 0;
    for (const auto& s : seqs) pages += (s.cached + s.fresh + page - 1) / page;
    // fp8_scale_ > 0: both caches fp8 e4m3 with that scale (the CPU reads the bytes the GPU holds).
    cache_c_ = cpu_.empty_kv_pages({pages, page, entry},
                                   fp8_scale_ > 0 ? core::KvCacheDtype::kFp8E4M3 : core::KvCacheDtype::kF32);
    cache_g_ = gpu_->empty_kv_pages({pages, page, entry},
                                    fp8_scale_ > 0 ? core::KvCacheDtype::kFp8E4M3 : core::KvCacheDtype::kBF16);
    std::vector<int32_t> order(static_cast<size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    tables_.clear();
    size_t next = 0;
    for (const auto& s : seqs) {
      std::vector<int32_t> t;
      for (int64_t p = 0; p < (s.cached + s.fresh + page - 1) / page; ++p) t.push_back(order[next++]);
      tables_.push_back(t);
    }
    step_.clear();
    T_ = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      rewrite(i, 0);
      step_.push_back({T_, seqs[i].fresh, seqs[i].cached, tables_[i]});
      T_ += seqs[i].fresh;
    }
    auto w = random(d.heads * (d.nope + d.v) * d.latent, 1.0f / std::sqrt(static_cast<float>(d.latent)));
    kv_b_bits_.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) kv_b_bits_[i] = core::f32_to_bf16(w[i]);
    kv_b_.out = d.heads * (d.nope + d.v);
    kv_b_.in = d.latent;
    kv_b_.name = "kv_b";
    kv_b_.weight = Tensor::view(DType::kBF16, {kv_b_.out, kv_b_.in}, kv_b_bits_.data());
    kv_b_g_ = gpu_->upload_linear(kv_b_);
    q_ = random(T_ * d.heads * (d.nope + d.rope), q_scale);
  }

  // New random latents at positions [from, cached + fresh) of sequence i, in both caches.
  void rewrite(size_t i, int64_t from) {
    const int64_t len = seqs_[i].cached + seqs_[i].fresh, n = len - from, entry = d_.latent + d_.rope;
    if (n <= 0) return;
    auto lat = random(n * entry, 1.0f);
    ops::AttentionSeq a{0, n, from, tables_[i]};
    ops::KvLayerView kc = view(cache_c_), kg = view(cache_g_);
    cpu_.kv_cache_write(kc, cpu_.from_host_f32({n, entry}, lat.data()), std::span(&a, 1));
    gpu_->kv_cache_write(kg, gpu_->from_host_f32({n, entry}, lat.data()), std::span(&a, 1));
  }

  ops::KvLayerView view(const Tensor& pages) const { return {pages, page_, fp8_scale_ > 0 ? fp8_scale_ : 1.0f}; }
  ops::MlaDims dims() const {
    return {d_.heads, d_.nope, d_.rope, d_.v, d_.latent, 1.0f / std::sqrt(static_cast<float>(d_.nope + d_.rope))};
  }
  std::vector<float> run_gpu() {
    Tensor q = gpu_->from_host_f32({T_, d_.heads * (d_.nope + d_.rope)}, q_.data());
    Tensor out = gpu_->empty({T_, d_.heads * d_.v});
    gpu_->mla_attention(q, view(cache_g_), kv_b_g_, dims(), step_, out);
    return gpu_->to_host_f32(out);
  }
  std::vector<float> run_cpu() {
    Tensor q = cpu_.from_host_f32({T_, d_.heads * (d_.nope + d_.rope)}, q_.data());
    Tensor out = cpu_.empty({T_, d_.heads * d_.v});
    cpu_.mla_attention(q, view(cache_c_), kv_b_, dims(), step_, out);
    return cpu_.to_host_f32(out);
  }

  // GPU against CPU over the step and per token; prints both measures for the record.
  void expect_matches_cpu(const std::string& what, const Precision& p) {
    const std::string kernel = std::string(p.wgmma) == "1" ? ", wgmma where it applies" : "";
    expect_matches_cpu(what + " (" + p.name + ", " + p.query_rows + "-row blocks" + kernel + ")", p.tol, p.token_tol);
  }
  // Only the prefill rows are held to `tol`/`token_tol`: the step's decode tokens run the absorbed
  // tensor-core decode kernel, which rounds q and p to bf16 (held to kDecodeTokenTol).
  static constexpr double kDecodeTokenTol = 2.5e-2;
  void expect_matches_cpu(const std::string& what, double tol, double token_tol) {
    const auto g = run_gpu(), c = run_cpu();
    ASSERT_EQ(g.size(), c.size());
    const int64_t w = d_.heads * d_.v;
    std::vector<bool> prefill_row(static_cast<size_t>(T_), false);
    for (const auto& s : step_)
      if (s.num_tokens > 1)
        for (int64_t i = 0; i < s.num_tokens; ++i) prefill_row[static_cast<size_t>(s.token_begin + i)] = true;
    double worst = 0, worst_decode = 0;
    int64_t worst_t = 0;
    std::vector<float> gp, cp;
    for (int64_t t = 0; t < T_; ++t) {
      std::vector<float> gt(g.begin() + t * w, g.begin() + (t + 1) * w), ct(c.begin() + t * w, c.begin() + (t + 1) * w);
      const double e = test::rel_rms(gt, ct);
      if (!prefill_row[static_cast<size_t>(t)]) {
        worst_decode = std::isnan(e) ? e : std::max(worst_decode, e);
        continue;
      }
      gp.insert(gp.end(), gt.begin(), gt.end());
      cp.insert(cp.end(), ct.begin(), ct.end());
      if (!(e <= worst)) worst_t = t;  // also catches NaN
      worst = std::isnan(e) ? e : std::max(worst, e);
    }
    EXPECT_LE(worst_decode, kDecodeTokenTol) << what << ", " << name(d_) << ": decode rows";
    const double err = gp.empty() ? 0.0 : test::rel_rms(gp, cp);
    std::printf("  %s, %s: rel_rms %.3g, worst token %.3g (row %lld)\n", what.c_str(), name(d_).c_str(), err, worst,
                static_cast<long long>(worst_t));
    EXPECT_LE(err, tol) << what << ", " << name(d_);
    EXPECT_LE(worst, token_tol) << what << ", " << name(d_) << ", token row " << worst_t;
  }

  std::mt19937_64 rng_{7};
  float fp8_scale_ = 0;  // > 0: fp8 caches with this scale
  ops::cpu::CpuOps cpu_;
  std::unique_ptr<ops::Ops> gpu_;
  Dims d_{};
  int64_t page_ = 64, T_ = 0;
  std::vector<Seq> seqs_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<ops::AttentionSeq> step_;
  Tensor cache_c_, cache_g_;
  std::vector<uint16_t> kv_b_bits_;
  ops::LinearWeight kv_b_, kv_b_g_;
  std::vector<float> q_;
};

// DeepSeek-V3 / Kimi head dims (fewer heads), the fixture models' dims (dsv3-tiny: 4 heads, 32+16,
// v 32, latent 64; kimi-k2-tiny: 8 heads, 16+16, v 24, latent 32), and dims that pick the other
// compiled tile shapes with padding (qk 96 -> 128, v 64 -> 128; qk 64, v 48 -> 64).
const std::vector<Dims> kDims = {
    {16, 128, 64, 128, 512}, {4, 32, 16, 32, 64}, {8, 16, 16, 24, 32}, {6, 64, 32, 64, 256}, {3, 48, 16, 48, 128}};

// Prefill chunks from scratch and after cached prefixes (some not page- or tile-aligned), one
// chunk of exactly one 64-row tile at a page boundary, one of two tokens, and decode tokens.
const std::vector<Seq> kRagged = {{0, 5}, {70, 1}, {3, 40}, {0, 1}, {128, 1}, {0, 130}, {200, 77}, {64, 64}, {1, 2}};

TEST_F(MlaPrefillTest, MatchesCpuOnRaggedBatchesWithCachedPrefixes) {
  for (const Precision& p : kPrecisions) {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
    ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
    ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
    for (const Dims& d : kDims) {
      for (int64_t page : {64, 16}) {
        build(d, page, kRagged, 1.0f);
        expect_matches_cpu("ragged, page " + std::to_string(page), p);
      }
    }
  }
}

TEST_F(MlaPrefillTest, LongContextsAndSharpAttention) {
  for (const Precision& p : kPrecisions) {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
    ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
    ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
    for (float q_scale : {1.0f, 3.0f}) {
      build(kDims[0], 64, {{1800, 200}, {0, 1}, {900, 3}, {0, 700}}, q_scale);
      expect_matches_cpu("2k context, q scale " + std::to_string(q_scale).substr(0, 3), p);
    }
    build(kDims[1], 64, {{1500, 500}, {2000, 1}}, 3.0f);
    expect_matches_cpu("2k context, q scale 3", p);
  }
}

// Contexts longer than a pass: each sequence's context is split into slices (at positions that
// are not tile multiples), several sequences share a pass, and the softmax state carries over.
TEST_F(MlaPrefillTest, SeveralPassesCarryTheSoftmaxState) {
  const std::vector<Seq> seqs = {{0, 150}, {130, 70}, {0, 1}, {37, 2}, {250, 5}, {0, 64}};
  for (const Precision& p : kPrecisions) {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
    ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
    ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
    for (const char* rows : {"100", "64", "1"}) {
      ScopedEnv env("TESSERA_MLA_PREFILL_PASS_ROWS", rows);
      for (const Dims& d : {kDims[0], kDims[2]}) {
        build(d, 64, seqs, 1.0f);
        expect_matches_cpu(std::string("passes of ") + rows + " positions", p);
      }
    }
  }
}

TEST_F(MlaPrefillTest, PrefillOnlyDecodeOnlyAndEmptySequences) {
  for (const Precision& p : kPrecisions) {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
    ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
    ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
    for (const Dims& d : {kDims[0], kDims[1]}) {
      build(d, 64, {{0, 33}, {10, 20}}, 1.0f);
      expect_matches_cpu("prefill only", p);
      build(d, 64, {{5, 0}, {0, 17}, {9, 0}, {3, 1}}, 1.0f);
      expect_matches_cpu("with empty sequences", p);
    }
  }
  // Decode only: the tensor-core absorbed path, whose bf16 q/P rounding needs the bf16 tolerance.
  for (const Dims& d : {kDims[0], kDims[1]}) {
    build(d, 64, {{70, 1}, {0, 1}}, 1.0f);
    expect_matches_cpu("decode only", kPrecisions[1]);
  }
}

// An fp8 cache: the prefill gather turns the bytes into their exact bf16 values and the scale is
// applied in fp32 (K/V GEMM alpha, q's rope part), so the CPU reading the same bytes is matched to
// the same tolerances as with a bf16 cache, at a scale of 1 and at one that is not a power of two
// (and a real checkpoint's k_scale ~0.01 with latents to match). One pass and several.
TEST_F(MlaPrefillTest, Fp8CacheMatchesTheCpuReadingTheSameBytes) {
  for (const Precision& p : kPrecisions) {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
    ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
    ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
    for (float scale : {1.0f, 0.37f}) {
      fp8_scale_ = scale;
      for (const Dims& d : kDims) {
        build(d, 64, kRagged, 1.0f);
        expect_matches_cpu("fp8 cache, scale " + std::to_string(scale).substr(0, 4), p);
      }
    }
    fp8_scale_ = 0.0096f;
    build(kDims[0], 16, kRagged, 1.0f);
    expect_matches_cpu("fp8 cache, scale 0.0096 (latents saturate at 4.3)", p);
    fp8_scale_ = 0.37f;
    ScopedEnv env("TESSERA_MLA_PREFILL_PASS_ROWS", "64");
    build(kDims[0], 64, {{0, 150}, {130, 70}, {0, 1}, {250, 5}}, 1.0f);
    expect_matches_cpu("fp8 cache, passes of 64 positions", p);
  }
  fp8_scale_ = 0;
}

// The precision a step runs at, by its longest prefill context (host only: runs without a GPU).
TEST(MlaPrefillPrecision, AutoIsSplitUpToItsContextAndBf16Beyond) {
  using ops::cuda::kMlaPrefillSplitMaxContext;
  using ops::cuda::mla_prefill_split_precision;
  {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", "auto");
    EXPECT_TRUE(mla_prefill_split_precision(1));
    EXPECT_TRUE(mla_prefill_split_precision(kMlaPrefillSplitMaxContext));
    EXPECT_FALSE(mla_prefill_split_precision(kMlaPrefillSplitMaxContext + 1));
    EXPECT_FALSE(mla_prefill_split_precision(65536));
  }
  {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", "split");
    EXPECT_TRUE(mla_prefill_split_precision(65536));
    // Unset: auto's rule (the default).
    unsetenv("TESSERA_MLA_PREFILL_PRECISION");
    EXPECT_TRUE(mla_prefill_split_precision(kMlaPrefillSplitMaxContext));
    EXPECT_FALSE(mla_prefill_split_precision(kMlaPrefillSplitMaxContext + 1));
  }
  {
    ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", "bf16");
    EXPECT_FALSE(mla_prefill_split_precision(8));
  }
  ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", "fast");
  try {
    (void)mla_prefill_split_precision(8);
    ADD_FAILURE() << "TESSERA_MLA_PREFILL_PRECISION=fast was taken";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected split, bf16 or auto"), std::string::npos) << e.what();
  }
}

// The attention block's height (host only): 128 query rows only where asked for and in bf16
// precision (split's hi and lo copies of 128 rows would not fit), its shared memory by hand from the
// layout (Q 128 x (192 + 8), K 64 x 200, V 64 x (128 + 8), bf16), and a bad setting named.
TEST(MlaPrefillQueryRows, OneHundredTwentyEightOnlyInBf16AndWhenAsked) {
  using ops::cuda::mla_prefill_query_rows;
  using ops::cuda::mla_prefill_query_rows_setting;
  EXPECT_EQ(mla_prefill_query_rows(false, 128), 128);
  EXPECT_EQ(mla_prefill_query_rows(true, 128), 64);
  EXPECT_EQ(mla_prefill_query_rows(false, 64), 64);
  EXPECT_EQ(ops::cuda::mla_prefill_attend_smem_bytes(128, 64, 128, false, 128), (128 * 200 + 64 * 200 + 64 * 136) * 2);
  EXPECT_EQ(ops::cuda::mla_prefill_attend_smem_bytes(128, 64, 128, false, 64), (64 * 200 + 64 * 200 + 64 * 136) * 2);
  {
    ScopedEnv rows("TESSERA_MLA_PREFILL_QUERY_ROWS", "64");
    EXPECT_EQ(mla_prefill_query_rows_setting(), 64);
    unsetenv("TESSERA_MLA_PREFILL_QUERY_ROWS");
    EXPECT_EQ(mla_prefill_query_rows_setting(), 128);  // the default
  }
  ScopedEnv rows("TESSERA_MLA_PREFILL_QUERY_ROWS", "96");
  try {
    (void)mla_prefill_query_rows_setting();
    ADD_FAILURE() << "TESSERA_MLA_PREFILL_QUERY_ROWS=96 was taken";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_MLA_PREFILL_QUERY_ROWS='96'"), std::string::npos) << e.what();
  }
}

// The Hopper kernel (host only): only where asked for, in bf16 precision, at DeepSeek-V3's head
// dims (nope 128, rope 64, v 128) and with sm_90a code on an SM90 GPU; its shared memory by hand
// (Q 128 x 192, two stages of K 128 x 192 and V 128 x 128, bf16, and 1 KB of alignment slack).
TEST(MlaPrefillWgmma, OnlyWhereAskedInBf16AtDeepSeekDimsOnSm90a) {
  using ops::cuda::mla_prefill_uses_wgmma;
  const ops::MlaDims dsv3{16, 128, 64, 128, 512, 0.07f}, tiny{4, 32, 16, 32, 64, 0.1f};
  EXPECT_TRUE(mla_prefill_uses_wgmma(true, false, dsv3, true));
  EXPECT_FALSE(mla_prefill_uses_wgmma(false, false, dsv3, true));  // not asked for
  EXPECT_FALSE(mla_prefill_uses_wgmma(true, true, dsv3, true));    // split precision
  EXPECT_FALSE(mla_prefill_uses_wgmma(true, false, dsv3, false));  // no sm_90a
  EXPECT_FALSE(mla_prefill_uses_wgmma(true, false, tiny, true));   // other head dims
  EXPECT_FALSE(mla_prefill_uses_wgmma(true, false, {16, 128, 64, 64, 512, 0.07f}, true));
  EXPECT_EQ(ops::cuda::mla_prefill_wgmma_smem_bytes(), (128 * 192 + 2 * (128 * 192 + 128 * 128)) * 2 + 1024);
}

TEST_F(MlaPrefillTest, BadPrecisionSettingIsNamed) {
  ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", "fp8");
  build(kDims[1], 64, {{0, 5}}, 1.0f);
  try {
    run_gpu();
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_MLA_PREFILL_PRECISION"), std::string::npos) << e.what();
  }
}

// Changing the latents of positions >= p must leave every earlier query's output bit for bit
// unchanged (masked keys contribute exactly 0), and change the outputs of the queries at >= p.
TEST_F(MlaPrefillTest, CausalMaskIsExact) {
  for (const char* rows : {"100000", "96"}) {
    ScopedEnv env("TESSERA_MLA_PREFILL_PASS_ROWS", rows);
    for (const Precision& p : kPrecisions) {
      ScopedEnv precision("TESSERA_MLA_PREFILL_PRECISION", p.name);
      ScopedEnv query_rows("TESSERA_MLA_PREFILL_QUERY_ROWS", p.query_rows);
      ScopedEnv wgmma("TESSERA_MLA_PREFILL_WGMMA", p.wgmma);
      for (const Dims& d : {kDims[0], kDims[2]}) {
        build(d, 64, {{0, 150}, {300, 90}, {20, 1}}, 3.0f);
        const auto before = run_gpu();
        const int64_t change[2] = {101, 341};  // absolute positions, mid-tile
        rewrite(0, change[0]);
        rewrite(1, change[1]);
        const auto after = run_gpu();
        const int64_t w = d.heads * d.v;
        for (size_t i = 0; i < 2; ++i) {
          for (int64_t t = 0; t < step_[i].num_tokens; ++t) {
            const int64_t row = step_[i].token_begin + t, pos = step_[i].start_pos + t;
            const bool same =
                std::equal(before.begin() + row * w, before.begin() + (row + 1) * w, after.begin() + row * w);
            if (pos < change[i])
              ASSERT_TRUE(same) << name(d) << ": query at position " << pos << " saw a later key (pass rows " << rows
                                << ", " << p.name << ")";
            else
              ASSERT_FALSE(same) << name(d) << ": query at position " << pos << " ignored key " << change[i] << " ("
                                 << p.name << ")";
          }
        }
      }
    }
  }
}

// Shapes the prefill kernel does not take (nope not a multiple of 8; qk above 192) keep the fp32
// absorbed path for the whole step, which matches the CPU to summation order.
TEST_F(MlaPrefillTest, UnsupportedShapesKeepTheAbsorbedPath) {
  for (const Dims& d : std::vector<Dims>{{4, 12, 8, 16, 32}, {2, 192, 64, 128, 64}}) {
    build(d, 64, kRagged, 1.0f);
    expect_matches_cpu("fallback", 1e-4, 1e-3);
  }
}

}  // namespace
}  // namespace tessera
