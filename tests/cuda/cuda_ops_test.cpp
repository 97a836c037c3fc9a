// Every CUDA op against its CPU reference op on random inputs (bf16-representable, so that the only
// differences left are summation order), over shapes that include ragged batches, cached
// prefixes, empty experts and very uneven routing. Skips itself without a GPU.
#include "ops/cuda/cuda_ops.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "model/golden_util.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/context.h"
#include "ops/cuda/tools/kernel_trace.h"
#include "support/require_gpu.h"

namespace tessera {
namespace {

using core::DType;
using core::Tensor;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
    gpu_ = ops::cuda::make_cuda_ops();
  }
  // Random bf16-representable fp32 values.
  std::vector<float> random(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = core::round_to_bf16(nd(rng_));
    return v;
  }
  Tensor cpu(core::Shape s, const std::vector<float>& v) { return cpu_.from_host_f32(std::move(s), v.data()); }
  Tensor gpu(core::Shape s, const std::vector<float>& v) { return gpu_->from_host_f32(std::move(s), v.data()); }
  void expect_close(const Tensor& c, const Tensor& g, double tol, const std::string& what) {
    auto a = cpu_.to_host_f32(c), b = gpu_->to_host_f32(g);
    ASSERT_EQ(a.size(), b.size()) << what;
    EXPECT_LE(test::rel_rms(b, a), tol) << what;
  }
  // A bf16 weight held on the host; the CPU backend reads it as is, the GPU gets it uploaded.
  struct HostWeight {
    std::vector<uint16_t> bits;
    ops::LinearWeight w;
  };
  HostWeight bf16_weight(int64_t out, int64_t in, float scale = 0.1f) {
    HostWeight h;
    auto v = random(out * in, scale);
    h.bits.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) h.bits[i] = core::f32_to_bf16(v[i]);
    h.w.out = out;
    h.w.in = in;
    h.w.name = "test";
    h.w.weight = Tensor::view(DType::kBF16, {out, in}, h.bits.data());
    return h;
  }
  // One step over a paged latent cache, the same on both backends: pages handed out in a shuffled
  // order, each sequence's cached prefix written, then the step's new tokens (random latents).
  struct Seq {
    int64_t cached, fresh;
  };
  struct RaggedStep {
    Tensor cache_c, cache_g;
    ops::KvLayerView kc, kg;
    std::vector<std::vector<int32_t>> tables;  // step's block tables point into these
    std::vector<ops::AttentionSeq> step;
    int64_t T = 0;
  };
  RaggedStep ragged_step(const std::vector<Seq>& seqs, int64_t page, int64_t entry, core::KvCacheDtype cpu_dtype,
                         core::KvCacheDtype gpu_dtype, float scale = 1.0f) {
    RaggedStep r;
    int64_t pages = 0;
    for (const auto& s : seqs) pages += (s.cached + s.fresh + page - 1) / page;
    r.cache_c = cpu_.empty_kv_pages({pages, page, entry}, cpu_dtype);
    r.cache_g = gpu_->empty_kv_pages({pages, page, entry}, gpu_dtype);
    r.kc = {r.cache_c, page, scale};
    r.kg = {r.cache_g, page, scale};
    std::vector<int32_t> order(static_cast<size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    size_t next = 0;
    for (const auto& s : seqs) {
      std::vector<int32_t> t;
      for (int64_t p = 0; p < (s.cached + s.fresh + page - 1) / page; ++p) t.push_back(order[next++]);
      r.tables.push_back(t);
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].cached == 0) continue;
      auto lat = random(seqs[i].cached * entry);
      ops::AttentionSeq a{0, seqs[i].cached, 0, r.tables[i]};
      cpu_.kv_cache_write(r.kc, cpu({seqs[i].cached, entry}, lat), std::span(&a, 1));
      gpu_->kv_cache_write(r.kg, gpu({seqs[i].cached, entry}, lat), std::span(&a, 1));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      r.step.push_back({r.T, seqs[i].fresh, seqs[i].cached, r.tables[i]});
      r.T += seqs[i].fresh;
    }
    auto lat = random(r.T * entry);
    cpu_.kv_cache_write(r.kc, cpu({r.T, entry}, lat), r.step);
    gpu_->kv_cache_write(r.kg, gpu({r.T, entry}, lat), r.step);
    return r;
  }
  // An absorbed-MLA problem over a ragged step's caches: random kv_b (bf16, also on the GPU) and q,
  // and the CPU's attention output over its cache, the reference every kernel is checked against.
  struct MlaProblem {
    HostWeight kv_b;
    ops::LinearWeight kv_b_gpu;
    std::vector<float> q;
    ops::MlaDims dims;
    Tensor expected;
  };
  MlaProblem mla_problem(const RaggedStep& r, int64_t heads, int64_t nope, int64_t rope, int64_t v, int64_t latent) {
    MlaProblem m{bf16_weight(heads * (nope + v), latent),
                 {},
                 random(r.T * heads * (nope + rope)),
                 ops::MlaDims{heads, nope, rope, v, latent, 0.14f},
                 cpu_.empty({r.T, heads * v})};
    m.kv_b_gpu = gpu_->upload_linear(m.kv_b.w);
    cpu_.mla_attention(cpu({r.T, heads * (nope + rope)}, m.q), r.kc, m.kv_b.w, m.dims, r.step, m.expected);
    return m;
  }
  // The head shapes the MLA tests sweep: Kimi-like (scaled down in heads) with the real latent 512 +
  // 64, small ones, and 40 heads (a 32-head block and a partial one).
  static std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> mla_shapes() {
    return {{8, 16, 16, 24, 32},
            {16, 128, 64, 128, 512},
            {8, 128, 64, 128, 512},
            {20, 32, 16, 32, 64},
            {40, 128, 64, 128, 512}};
  }
  std::mt19937_64 rng_{42};
  ops::cpu::CpuOps cpu_;
  std::unique_ptr<ops::Ops> gpu_;
};

TEST_F(CudaOpsTest, Embedding) {
  const int64_t V = 300, H = 96;
  HostWeight table = bf16_weight(V, H, 1.0f);
  std::vector<int32_t> ids = {0, 299, 17, 17, 5};
  Tensor gt = gpu_->upload_table(table.w.weight);
  Tensor c = cpu_.empty({5, H}), g = gpu_->empty({5, H});
  cpu_.embedding(table.w.weight, ids, c);
  gpu_->embedding(gt, ids, g);
  expect_close(c, g, 0.0, "embedding");
  std::vector<int32_t> bad = {300};
  Tensor g1 = gpu_->empty({1, H});
  EXPECT_THROW(gpu_->embedding(gt, bad, g1), core::Error);
}

TEST_F(CudaOpsTest, RmsNormIncludingColumnRangesInPlace) {
  for (auto [rows, width, begin, d] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 64, 0, 64}, {7, 7168, 0, 7168}, {33, 576, 0, 512}, {5, 100, 10, 50}}) {
    auto xv = random(rows * width), wv = random(d);
    Tensor wc = cpu(core::Shape{d}, wv), wg = gpu_->upload_vector(wc);
    Tensor xc = cpu({rows, width}, xv), xg = gpu({rows, width}, xv);
    Tensor oc = cpu_.empty({rows, d}), og = gpu_->empty({rows, d});
    cpu_.rms_norm(xc, wc, 1e-6f, oc, begin);
    gpu_->rms_norm(xg, wg, 1e-6f, og, begin);
    expect_close(oc, og, 1e-6, "rms_norm dense out");
    cpu_.rms_norm(xc, wc, 1e-6f, xc, begin);  // in place over the column range
    gpu_->rms_norm(xg, wg, 1e-6f, xg, begin);
    expect_close(xc, xg, 1e-6, "rms_norm in place");
  }
}

TEST_F(CudaOpsTest, LinearOverShapes) {
  for (auto [T, out, in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 64, 64},
           {3, 1024, 256},
           {17, 80, 256},
           {128, 512, 1536},
           {1, 7, 13},
           // <= 4 tokens, K a multiple of 256: matrix-vector kernels, K split over warps when narrow
           {1, 576, 7168},
           {2, 1536, 2048},
           {4, 12, 512},
           {1, 2048, 768}}) {
    HostWeight w = bf16_weight(out, in);
    auto wg = gpu_->upload_linear(w.w);
    auto xv = random(T * in);
    Tensor oc = cpu_.empty({T, out}), og = gpu_->empty({T, out});
    cpu_.linear(cpu({T, in}, xv), w.w, oc);
    gpu_->linear(gpu({T, in}, xv), wg, og);
    expect_close(oc, og, 1e-5, "linear " + std::to_string(T) + "x" + std::to_string(out) + "x" + std::to_string(in));
  }
}

TEST_F(CudaOpsTest, ElementwiseAndRope) {
  const int64_t T = 9, W = 3 * 48, half = 8;
  auto a = random(T * W), b = random(T * W), c = random(T * half), s = random(T * half);
  Tensor ac = cpu({T, W}, a), ag = gpu({T, W}, a);
  cpu_.add_inplace(ac, cpu({T, W}, b));
  gpu_->add_inplace(ag, gpu({T, W}, b));
  expect_close(ac, ag, 1e-7, "add");
  {
    // The fused residual add + norm equals the two ops in sequence (x updated, out normalised).
    auto xv = random(T * W), yv = random(T * W), wv = random(W);
    Tensor xc = cpu({T, W}, xv), xg = gpu({T, W}, xv), wc = cpu({W}, wv), wg = gpu({W}, wv);
    Tensor nc = cpu_.empty({T, W}), ng = gpu_->empty({T, W});
    cpu_.add_rms_norm(xc, cpu({T, W}, yv), wc, 1e-6f, nc);
    gpu_->add_rms_norm(xg, gpu({T, W}, yv), wg, 1e-6f, ng);
    expect_close(xc, xg, 1e-7, "add_rms_norm residual");
    expect_close(nc, ng, 1e-6, "add_rms_norm norm");
  }
  Tensor sc = cpu_.empty({T, W}), sg = gpu_->empty({T, W});
  cpu_.silu_mul(cpu({T, W}, a), cpu({T, W}, b), sc);
  gpu_->silu_mul(gpu({T, W}, a), gpu({T, W}, b), sg);
  expect_close(sc, sg, 1e-6, "silu_mul");
  ops::RopeTables rc{cpu({T, half}, c), cpu({T, half}, s)}, rg{gpu({T, half}, c), gpu({T, half}, s)};
  cpu_.rope_inplace(ac, rc, 32, 48, 3);
  gpu_->rope_inplace(ag, rg, 32, 48, 3);
  expect_close(ac, ag, 1e-6, "rope");
  std::vector<int64_t> rows = {8, 0, 3};
  Tensor gc = cpu_.empty({3, W}), gg = gpu_->empty({3, W});
  cpu_.gather_rows(ac, rows, gc);
  gpu_->gather_rows(ag, rows, gg);
  expect_close(gc, gg, 1e-6, "gather_rows");
}

// The fused decode ops against the CPU's, which run the ops they replace in sequence: two
// projections of one input in one launch (q_a and kv_a), the q_a norm folded into q_b, including
// the shapes that fall back to separate ops (more tokens than the matrix-vector kernels take, K not
// a multiple of 256, a normalised row wider than the kernel stages).
TEST_F(CudaOpsTest, FusedProjectionsEqualTheOpsInSequence) {
  for (auto [T, out1, out2, in] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1536, 576, 7168}, {2, 64, 48, 256}, {1, 12, 8, 512}, {3, 64, 48, 256}, {1, 7, 5, 13}}) {
    HostWeight a = bf16_weight(out1, in), b = bf16_weight(out2, in);
    auto ag = gpu_->upload_linear(a.w), bg = gpu_->upload_linear(b.w);
    auto xv = random(T * in);
    Tensor c1 = cpu_.empty({T, out1}), c2 = cpu_.empty({T, out2}), g1 = gpu_->empty({T, out1}),
           g2 = gpu_->empty({T, out2});
    cpu_.linear_pair(cpu({T, in}, xv), a.w, c1, b.w, c2);
    gpu_->linear_pair(gpu({T, in}, xv), ag, g1, bg, g2);
    const std::string what = fmt::format("linear_pair {}x({}, {})x{}", T, out1, out2, in);
    expect_close(c1, g1, 1e-5, what + " first");
    expect_close(c2, g2, 1e-5, what + " second");
  }
  // The matrix-vector kernels keep the normalised row in fp32; the GEMM path (3 tokens, K = 24)
  // rounds it to bf16 as every GEMM input (~2^-9 relative).
  for (auto [T, out, in, tol] : std::vector<std::tuple<int64_t, int64_t, int64_t, double>>{{1, 3072, 1536, 1e-5},
                                                                                           {2, 512, 1536, 1e-5},
                                                                                           {1, 64, 4096, 1e-5},
                                                                                           {1, 64, 4352, 1e-5},
                                                                                           {3, 256, 512, 4e-3},
                                                                                           {1, 5, 24, 4e-3}}) {
    HostWeight w = bf16_weight(out, in);
    auto wg = gpu_->upload_linear(w.w);
    auto xv = random(T * in, 3.0f), nv = random(in);
    Tensor nc = cpu({in}, nv), ng = gpu_->upload_vector(nc);
    Tensor oc = cpu_.empty({T, out}), og = gpu_->empty({T, out});
    cpu_.rms_norm_linear(cpu({T, in}, xv), nc, 1e-6f, w.w, oc);
    gpu_->rms_norm_linear(gpu({T, in}, xv), ng, 1e-6f, wg, og);
    expect_close(oc, og, tol, fmt::format("rms_norm_linear {}x{}x{}", T, out, in));
  }
}

// mla_prepare (one kernel on the GPU) against the CPU's rope, norm, rope and cache write: q and the
// latent compared as tensors, the caches slot by slot (every slot, so a write to a wrong slot or a
// missed one shows), for bf16 and fp8 caches, decode tokens and a prefill chunk.
TEST_F(CudaOpsTest, MlaPrepareEqualsRopeNormAndCacheWrite) {
  for (auto [heads, nope, rope, latent] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {64, 128, 64, 512}, {8, 16, 16, 32}, {20, 32, 16, 64}}) {
    for (bool fp8 : {false, true}) {
      const int64_t page = 16, entry = latent + rope, half = rope / 2, width = heads * (nope + rope);
      const float scale = fp8 ? 0.05f : 1.0f;
      RaggedStep r = ragged_step({{0, 1}, {70, 1}, {3, 5}, {17, 1}}, page, entry,
                                 fp8 ? core::KvCacheDtype::kFp8E4M3 : core::KvCacheDtype::kF32,
                                 fp8 ? core::KvCacheDtype::kFp8E4M3 : core::KvCacheDtype::kBF16, scale);
      const int64_t T = r.T;
      auto qv = random(T * width), kvv = random(T * entry, 2.0f), nv = random(latent), cv = random(T * half),
           sv = random(T * half);
      Tensor qc = cpu({T, width}, qv), qg = gpu({T, width}, qv), kc = cpu({T, entry}, kvv), kg = gpu({T, entry}, kvv);
      Tensor nc = cpu({latent}, nv), ng = gpu_->upload_vector(nc);
      ops::RopeTables rc{cpu({T, half}, cv), cpu({T, half}, sv)}, rg{gpu({T, half}, cv), gpu({T, half}, sv)};
      ops::MlaDims dims{heads, nope, rope, nope, latent, 0.1f};
      cpu_.mla_prepare(qc, kc, nc, 1e-6f, rc, dims, r.kc, r.step);
      gpu_->mla_prepare(qg, kg, ng, 1e-6f, rg, dims, r.kg, r.step);
      const std::string what = fmt::format("mla_prepare {} heads latent {} {}", heads, latent, fp8 ? "fp8" : "bf16");
      expect_close(qc, qg, 1e-6, what + ": q");
      expect_close(kc, kg, 1e-6, what + ": latent");
      // Both caches as floats: the CPU's F32 or fp8, the GPU's bf16 or fp8 (q · scale).
      const std::vector<uint8_t> gb = ops::cuda::device_bytes(r.cache_g);
      const int64_t n = r.cache_c.numel();
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        if (fp8) {
          want[i] = core::fp8_e4m3_to_f32(r.cache_c.data<uint8_t>()[i]) * scale;
          got[i] = core::fp8_e4m3_to_f32(gb[i]) * scale;
        } else {
          want[i] = r.cache_c.data<float>()[i];
          uint16_t bits;
          std::memcpy(&bits, gb.data() + 2 * i, 2);
          got[i] = core::bf16_to_f32(bits);
        }
      }
      // bf16 rounds each value (≤ 2^-9 relative); fp8 values agree but for a rare rounding tie
      // that the two norms' summation orders break differently.
      const double tol = fp8 ? 2e-2 : 4e-3;
      for (int64_t slot = 0; slot < n / entry; ++slot) {
        std::vector<float> a(want.begin() + slot * entry, want.begin() + (slot + 1) * entry),
            b(got.begin() + slot * entry, got.begin() + (slot + 1) * entry);
        if (std::all_of(a.begin(), a.end(), [](float x) { return x == 0.0f; })) {  // a slot no one writes
          ASSERT_TRUE(std::all_of(b.begin(), b.end(), [](float x) { return x == 0.0f; })) << what << ": slot " << slot;
          continue;
        }
        ASSERT_LE(test::rel_rms(b, a), tol) << what << ": cache slot " << slot;
      }
    }
  }
}

TEST_F(CudaOpsTest, MlaAttentionRaggedBatchWithCachedPrefixes) {
  for (auto [heads, nope, rope, v, latent] : mla_shapes()) {
    const int64_t page = 64, entry = latent + rope;
    // Decode tokens at many context lengths (partial tiles, several tiles, a context long enough to
    // be split), mixed with prefill chunks with and without a cached prefix; then a decode step of
    // three tokens (the matrix-vector W_UK / W_UV path at latent 512).
    for (const auto& seqs : {std::vector<Seq>{{0, 5}, {70, 1}, {3, 40}, {0, 1}, {128, 1}, {1500, 1}, {31, 1}},
                             std::vector<Seq>{{70, 1}, {1500, 1}, {4000, 1}}}) {
      RaggedStep r = ragged_step(seqs, page, entry, core::KvCacheDtype::kF32, core::KvCacheDtype::kBF16);
      auto& [cache_c, cache_g, kc, kg, tables, step, T] = r;
      const MlaProblem m = mla_problem(r, heads, nope, rope, v, latent);
      const auto& [kv_b, kv_b_g, qv, dims, oc] = m;
      // The fp32 CUDA-core kernel differs from the CPU only in summation order; the tensor-core
      // kernel also rounds the (absorbed, scaled) query and the probabilities to bf16 (~2^-9 each).
      for (const auto& [kernel, tol] :
           {std::pair<std::string, double>{"cuda-core", 1e-4}, {"mma", 1e-2}, {"kv-major", 1e-2}}) {
        if (kernel == "kv-major" && !ops::cuda::mla_kv_major_supported(latent, rope)) continue;
        auto backend = ops::cuda::make_cuda_ops("mla=" + kernel);
        ops::KvLayerView kv{cache_g, page};
        Tensor og = backend->empty({T, heads * v});
        backend->mla_attention(gpu({T, heads * (nope + rope)}, qv), kv, kv_b_g, dims, step, og);
        expect_close(oc, og, tol,
                     "mla_attention " + kernel + " latent " + std::to_string(latent) + " tokens " + std::to_string(T));
      }
    }
  }
}

// The Hopper wgmma decode kernel (64 heads a block) at the real latent width, 64 and 128 heads:
// decode tokens at contexts 1, 70, 128, 1500, 5000 and around the 64-position tile edges (partial
// tiles, several context splits, empty trailing splits), beside a prefill chunk whose decode rows
// come back through the same kernel; each token checked on its own, so a failure names its
// context. Pages of 64 positions take the TMA loads, pages of 32 the cp.async ones (a 64-position
// tile spans two pages). Skips on GPUs or builds the kernel does not run on; forcing it on a head
// count it cannot take is refused by name on any GPU.
TEST_F(CudaOpsTest, MlaWgmmaDecodeAgainstCpuReference) {
  const int64_t nope = 128, rope = 64, v = 128, latent = 512, entry = latent + rope;
  const auto caps = ops::cuda::query_device_caps();
  const std::string problem = ops::cuda::mla_wgmma_problem(caps.sm, caps.smem_per_block_optin, 64, latent, rope);
  // A ragged batch, and one sequence with a long context (a batch-1 step: the most context splits,
  // with TESSERA_MLA_WGMMA_PAIRS two blocks each).
  const std::vector<std::vector<Seq>> steps = {
      {{0, 1}, {69, 1}, {127, 1}, {1499, 1}, {4999, 1}, {63, 1}, {64, 1}, {3, 40}, {65, 1}, {191, 1}, {31, 1}},
      {{32000, 1}}};
  for (const auto& [heads, page] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {128, 64}, {64, 32}}) {
    if (!problem.empty()) break;
    for (const std::vector<Seq>& seqs : steps) {
      RaggedStep r = ragged_step(seqs, page, entry, core::KvCacheDtype::kF32, core::KvCacheDtype::kBF16);
      auto& [cache_c, cache_g, kc, kg, tables, step, T] = r;
      const MlaProblem m = mla_problem(r, heads, nope, rope, v, latent);  // (kv_b is uploaded per backend below)
      const auto& [kv_b, kv_b_gpu, qv, dims, oc] = m;
      const auto ref = cpu_.to_host_f32(oc);
      // Forced and chosen by the registry (auto picks wgmma for these decode rows on Hopper).
      for (const std::string kernels : {"mla=wgmma", ""}) {
        auto backend = ops::cuda::make_cuda_ops(kernels);
        auto kv_b_g = backend->upload_linear(kv_b.w);
        ops::KvLayerView kv{cache_g, page};
        Tensor og = backend->empty({T, heads * v});
        backend->mla_attention(backend->from_host_f32({T, heads * (nope + rope)}, qv.data()), kv, kv_b_g, dims, step,
                               og);
        const auto got = backend->to_host_f32(og);
        ASSERT_EQ(got.size(), ref.size());
        int64_t row = 0;
        for (const auto& s : seqs) {
          for (int64_t i = 0; i < s.fresh; ++i, ++row) {
            const auto first = static_cast<std::ptrdiff_t>(row * heads * v), last = first + heads * v;
            const std::vector<float> a(got.begin() + first, got.begin() + last),
                b(ref.begin() + first, ref.begin() + last);
            // bf16 q and p as in the KV-major kernel (~2^-9 each).
            EXPECT_LE(test::rel_rms(a, b), 1e-2) << "wgmma (" << (kernels.empty() ? "auto" : kernels) << ") " << heads
                                                 << " heads, pages of " << page << ", context " << s.cached + i + 1;
          }
        }
      }
    }
  }
  // 40 heads is not a multiple of 64: forcing the kernel is refused by name, on any GPU.
  const int64_t heads = 40, page = 64;
  std::vector<int32_t> table = {0};
  Tensor cache = gpu_->empty_kv_pages({1, page, entry}, core::KvCacheDtype::kBF16);
  ops::KvLayerView kv{cache, page};
  ops::AttentionSeq a{0, 1, 0, table};
  HostWeight kv_b = bf16_weight(heads * (nope + v), latent);
  auto backend = ops::cuda::make_cuda_ops("mla=wgmma");
  auto kv_b_g = backend->upload_linear(kv_b.w);
  Tensor og = backend->empty({1, heads * v});
  try {
    backend->mla_attention(gpu({1, heads * (nope + rope)}, random(heads * (nope + rope))), kv, kv_b_g,
                           {heads, nope, rope, v, latent, 0.14f}, std::span(&a, 1), og);
    ADD_FAILURE() << "forcing the wgmma kernel on 40 heads was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mla=wgmma was forced"), std::string::npos) << e.what();
  }
  if (!problem.empty()) GTEST_SKIP() << problem;
}

// fp8 KV cache (ops::KvLayerView): the GPU writes the CPU's bytes exactly (both round x / scale to
// nearest even and saturate), over page-crossing ragged writes, ties, subnormals and saturation.
TEST_F(CudaOpsTest, Fp8KvCacheWriteGivesTheCpusBytes) {
  const int64_t page = 16;
  for (int64_t entry : {48, 80, 576, 40}) {
    for (float scale : {1.0f, 0.0096342135f, 0.37f, 3.0f}) {
      const int64_t pages = 5;
      Tensor cc = cpu_.empty_kv_pages({pages, page, entry}, core::KvCacheDtype::kFp8E4M3);
      Tensor cg = gpu_->empty_kv_pages({pages, page, entry}, core::KvCacheDtype::kFp8E4M3);
      ops::KvLayerView kc{cc, page, scale}, kg{cg, page, scale};
      std::vector<int32_t> t0 = {3, 1}, t1 = {0, 4, 2};
      // Sequence 0: positions 10..21 (crosses a page); sequence 1: positions 0..35.
      std::vector<ops::AttentionSeq> step = {{0, 12, 10, t0}, {12, 36, 0, t1}};
      const int64_t T = 48;
      auto x = random(T * entry, 2.0f * scale);
      // Special values at the start of the first rows: saturation, signed zeros, e4m3 ties and
      // subnormals (exact after / scale only when scale is 1, but harmless otherwise).
      const float specials[] = {1e6f,   -1e6f,  0.0f,          -0.0f,         1.0625f,       -1.1875f,
                                464.0f, 456.0f, 0.0029296875f, 0.0009765625f, 0.0048828125f, 3e-7f};
      for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i] * (scale == 1.0f ? 1.0f : scale);
      cpu_.kv_cache_write(kc, cpu({T, entry}, x), step);
      gpu_->kv_cache_write(kg, gpu({T, entry}, x), step);
      const std::vector<uint8_t> got = ops::cuda::device_bytes(cg);
      ASSERT_EQ(got.size(), cc.nbytes());
      const uint8_t* want = cc.data<uint8_t>();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "entry " << entry << " scale " << scale << ": byte " << i << " (page "
                                   << i / (page * entry) << ", slot " << (i / entry) % page << ", element " << i % entry
                                   << ")";
    }
  }
}

// MLA attention over an fp8 cache, GPU against the CPU reading the same bytes, over the ragged
// shapes of MlaAttentionRaggedBatchWithCachedPrefixes: the same tolerances as the bf16 cache (the
// dequantized values are exact on both sides; the tensor-core kernels round q and p to bf16 as with
// a bf16 cache). The heads-as-M kernel reads bf16 only: forcing it is an error naming both.
TEST_F(CudaOpsTest, MlaAttentionFp8CacheMatchesTheCpuFp8Cache) {
  for (auto [heads, nope, rope, v, latent] : mla_shapes()) {
    const int64_t page = 64, entry = latent + rope;
    const float scale = 0.37f;  // not a power of two: the scale must be applied, not just the bytes
    const std::vector<Seq> seqs = {{0, 5}, {70, 1}, {3, 40}, {0, 1}, {128, 1}, {1500, 1}, {31, 1}};
    RaggedStep r = ragged_step(seqs, page, entry, core::KvCacheDtype::kFp8E4M3, core::KvCacheDtype::kFp8E4M3, scale);
    auto& [cache_c, cache_g, kc, kg, tables, step, T] = r;
    ASSERT_EQ(ops::cuda::device_bytes(cache_g),
              std::vector<uint8_t>(cache_c.data<uint8_t>(), cache_c.data<uint8_t>() + cache_c.nbytes()));
    const MlaProblem m = mla_problem(r, heads, nope, rope, v, latent);
    const auto& [kv_b, kv_b_g, qv, dims, oc] = m;
    // "auto": prefill rows through the prefill path (fp8 gathered to bf16, split precision), decode
    // rows through the KV-major kernel where it has an instance, else the fp32 kernel.
    for (const auto& [kernel, tol] :
         {std::pair<std::string, double>{"cuda-core", 1e-4}, {"kv-major", 1e-2}, {"auto", 1e-2}}) {
      if (kernel == "kv-major" && !ops::cuda::mla_kv_major_supported(latent, rope)) continue;
      auto backend = ops::cuda::make_cuda_ops("mla=" + kernel);
      Tensor og = backend->empty({T, heads * v});
      backend->mla_attention(gpu({T, heads * (nope + rope)}, qv), kg, kv_b_g, dims, step, og);
      expect_close(oc, og, tol, "fp8 cache mla_attention " + kernel + " latent " + std::to_string(latent));
    }
    auto mma = ops::cuda::make_cuda_ops("mla=mma");
    Tensor og = mma->empty({T, heads * v});
    try {
      mma->mla_attention(gpu({T, heads * (nope + rope)}, qv), kg, kv_b_g, dims, step, og);
      ADD_FAILURE() << "mla=mma read an fp8 cache";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("mla=mma"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
    }
    EXPECT_THROW(mma->empty_kv_pages({1, page, entry}, core::KvCacheDtype::kFp8E4M3), core::Error);
  }
}

// The KV-major kernel's shared memory fits SM120's 99 KB a block, bf16 and fp8 caches alike. At
// 512 + 64 (bytes): Q 16 (8) x 584 x 2; bf16: two tiles 2 x 32 x 584 x 2; fp8: one bf16 tile
// 32 x 584 x 2 and staging 2 x 32 x 576; P 16 (8) x 40 x 2; the Sᵀ partials of three of the four K
// parts (8 warps) 3 x 2 x 16 x 16 (8) x 4; statistics 8 x 16 (8) x 4. The 16-head bf16 instance
// takes exactly the 99 KB.
TEST(KvMajorSmem, InstancesFitSm120) {
  EXPECT_EQ(ops::cuda::mla_kv_major_shared_bytes(16, 512, 64, true), 18688 + 37376 + 36864 + 1280 + 6144 + 512);
  EXPECT_EQ(ops::cuda::mla_kv_major_shared_bytes(8, 512, 64, true), 9344 + 37376 + 36864 + 640 + 3072 + 256);
  EXPECT_EQ(ops::cuda::mla_kv_major_shared_bytes(16, 512, 64, false), 18688 + 74752 + 1280 + 6144 + 512);
  EXPECT_EQ(ops::cuda::mla_kv_major_shared_bytes(8, 512, 64, false), 9344 + 74752 + 640 + 3072 + 256);
  for (int64_t heads : {8, 16})
    for (bool fp8 : {false, true}) {
      EXPECT_LE(ops::cuda::mla_kv_major_shared_bytes(heads, 512, 64, fp8), 99 * 1024) << heads << " " << fp8;
      EXPECT_LE(ops::cuda::mla_kv_major_shared_bytes(heads, 64, 16, fp8), 99 * 1024) << heads << " " << fp8;
    }
}

TEST_F(CudaOpsTest, MoeRoutingAndExpertsWithUnevenRouting) {
  for (auto [T, E, K, G, TG] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {1, 16, 4, 4, 2},
           {37, 384, 8, 1, 1},
           {64, 256, 8, 8, 4},
           // <= 8 tokens without groups: logits and the compact selection in one launch
           {1, 384, 8, 1, 1},
           {5, 160, 6, 1, 1},
           {8, 1000, 8, 1, 1}}) {
    const int64_t H = 128, I = 64;
    HostWeight gate = bf16_weight(E, H, 1.0f);
    auto bias = random(E, 0.05f);
    for (auto& b : bias) b = std::abs(b);
    auto xv = random(T * H);
    ops::RouterConfig rc{E, K, G, TG, true, 2.5f};
    Tensor ic = cpu_.empty_i32({T, K}), wc = cpu_.empty({T, K}), ig = gpu_->empty_i32({T, K}), wg = gpu_->empty({T, K});
    Tensor bc = cpu(core::Shape{E}, bias);
    cpu_.moe_route(cpu({T, H}, xv), gate.w, bc, rc, ic, wc);
    gpu_->moe_route(gpu({T, H}, xv), gpu_->upload_linear(gate.w), gpu_->upload_vector(bc), rc, ig, wg);
    // Same experts (order within a token may differ), same weights.
    std::vector<int32_t> idc = cpu_.to_host_i32(ic), idg = gpu_->to_host_i32(ig);
    std::vector<float> wcv = cpu_.to_host_f32(wc), wgv = gpu_->to_host_f32(wg);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::pair<int32_t, float>> a, b;
      for (int64_t k = 0; k < K; ++k) {
        a.emplace_back(idc[t * K + k], wcv[t * K + k]);
        b.emplace_back(idg[t * K + k], wgv[t * K + k]);
      }
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(a[k].first, b[k].first) << "token " << t;
        EXPECT_NEAR(a[k].second, b[k].second, 1e-5) << "token " << t;
      }
    }
    // Experts: very uneven routing (most tokens to expert 1, some experts empty).
    std::vector<ops::ExpertWeights> ec, eg;
    std::vector<HostWeight> keep;
    const int64_t n_exp = 6;
    for (int64_t e = 0; e < n_exp; ++e) {
      keep.push_back(bf16_weight(I, H));
      keep.push_back(bf16_weight(I, H));
      keep.push_back(bf16_weight(H, I));
    }
    for (int64_t e = 0; e < n_exp; ++e) {
      ec.push_back({keep[3 * e].w, keep[3 * e + 1].w, keep[3 * e + 2].w});
      eg.push_back({gpu_->upload_linear(keep[3 * e].w), gpu_->upload_linear(keep[3 * e + 1].w),
                    gpu_->upload_linear(keep[3 * e + 2].w)});
    }
    const int64_t k2 = 2;
    std::vector<int32_t> ids(static_cast<size_t>(T * k2));
    std::vector<float> w(static_cast<size_t>(T * k2));
    for (int64_t t = 0; t < T; ++t) {
      ids[t * k2] = 1;
      ids[t * k2 + 1] = t % 7 == 0 ? 4 : 3;  // experts 0, 2 and 5 get no token
      w[t * k2] = 0.7f;
      w[t * k2 + 1] = 0.3f;
    }
    Tensor idc2 = cpu_.from_host_i32({T, k2}, ids.data()), idg2 = gpu_->from_host_i32({T, k2}, ids.data());
    Tensor oc = cpu_.empty({T, H});
    cpu_.moe_experts(cpu({T, H}, xv), ec, idc2, cpu({T, k2}, w), oc);
    // The GPU rounds each GEMM input to bf16, including the intermediate silu(gate)*up activations,
    // which the CPU keeps in fp32: ~2^-9 relative per element.
    for (const char* kernel : {"moe=grouped", "moe=per-expert"}) {
      auto backend = ops::cuda::make_cuda_ops(kernel);
      Tensor og = backend->empty({T, H});
      backend->moe_experts(gpu({T, H}, xv), eg, idg2, gpu({T, k2}, w), og);
      expect_close(oc, og, 5e-3, std::string("moe_experts ") + kernel + " T=" + std::to_string(T));
    }
  }
}

// Random top-k routing over many experts, several 16-token tiles per expert, widths that leave a
// partial block of rows, and a shape the grouped kernels refuse.
TEST_F(CudaOpsTest, MoeExpertsGroupedKernelsOverShapes) {
  struct Case {
    int64_t T, E, K, H, I;
    int64_t shared_inter;  // 0: no shared expert; I: runs beside the routed ones; other: separately
  };
  for (const Case c : {Case{1, 40, 8, 512, 96, 96}, Case{16, 40, 8, 512, 96, 0}, Case{300, 12, 4, 256, 64, 64},
                       Case{128, 64, 8, 1024, 256, 256}, Case{3, 16, 4, 256, 64, 128},
                       // <= 4 tokens with widths that are multiples of 256: the matrix-vector kernels
                       Case{1, 40, 8, 512, 256, 256}, Case{2, 24, 6, 768, 512, 0}, Case{4, 64, 8, 256, 256, 512},
                       Case{3, 12, 4, 512, 256, 256},
                       // more tokens: experts with <= 4 pairs on the matrix-vector kernels, the rest on MMAs
                       Case{16, 24, 6, 512, 256, 256}, Case{40, 64, 8, 256, 512, 0}}) {
    std::vector<HostWeight> keep;
    std::vector<ops::ExpertWeights> ec, eg;
    for (int64_t e = 0; e < c.E; ++e) {
      keep.push_back(bf16_weight(c.I, c.H));
      keep.push_back(bf16_weight(c.I, c.H));
      keep.push_back(bf16_weight(c.H, c.I));
    }
    for (int64_t e = 0; e < c.E; ++e) {
      ec.push_back({keep[3 * e].w, keep[3 * e + 1].w, keep[3 * e + 2].w});
      eg.push_back({gpu_->upload_linear(keep[3 * e].w), gpu_->upload_linear(keep[3 * e + 1].w),
                    gpu_->upload_linear(keep[3 * e + 2].w)});
    }
    std::vector<int32_t> ids;
    std::vector<float> w;
    std::uniform_real_distribution<float> u(0.05f, 1.0f);
    for (int64_t t = 0; t < c.T; ++t) {
      std::vector<int32_t> all(static_cast<size_t>(c.E));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng_);
      for (int64_t k = 0; k < c.K; ++k) {
        ids.push_back(all[static_cast<size_t>(k)]);
        w.push_back(u(rng_));
      }
    }
    std::optional<ops::ExpertWeights> sc, sg;
    if (c.shared_inter > 0) {
      keep.push_back(bf16_weight(c.shared_inter, c.H));
      keep.push_back(bf16_weight(c.shared_inter, c.H));
      keep.push_back(bf16_weight(c.H, c.shared_inter));
      const size_t b = keep.size() - 3;
      sc = ops::ExpertWeights{keep[b].w, keep[b + 1].w, keep[b + 2].w};
      sg = ops::ExpertWeights{gpu_->upload_linear(keep[b].w), gpu_->upload_linear(keep[b + 1].w),
                              gpu_->upload_linear(keep[b + 2].w)};
    }
    auto xv = random(c.T * c.H);
    Tensor oc = cpu_.empty({c.T, c.H});
    cpu_.moe_experts(cpu({c.T, c.H}, xv), ec, cpu_.from_host_i32({c.T, c.K}, ids.data()), cpu({c.T, c.K}, w), oc,
                     sc ? &*sc : nullptr);
    for (const char* kernel : {"moe=grouped", "moe=per-expert", ""}) {
      const std::string label =
          fmt::format("moe_experts {} T={} E={} H={} I={} shared {}", kernel, c.T, c.E, c.H, c.I, c.shared_inter);
      try {
        auto backend = ops::cuda::make_cuda_ops(kernel);
        Tensor og = backend->empty({c.T, c.H});
        backend->moe_experts(gpu({c.T, c.H}, xv), eg, backend->from_host_i32({c.T, c.K}, ids.data()),
                             gpu({c.T, c.K}, w), og, sg ? &*sg : nullptr);
        expect_close(oc, og, 5e-3, label);
      } catch (const core::Error& e) {
        FAIL() << label << ": " << e.what();  // a device error is sticky: the later cases cannot run
      }
    }
  }
  // moe_intermediate 48 is not a multiple of 32: forcing the grouped kernels is refused by name.
  HostWeight g = bf16_weight(48, 128), u = bf16_weight(48, 128), d = bf16_weight(128, 48);
  std::vector<ops::ExpertWeights> eg{{gpu_->upload_linear(g.w), gpu_->upload_linear(u.w), gpu_->upload_linear(d.w)}};
  const int32_t id = 0;
  const float wt = 1.0f;
  auto backend = ops::cuda::make_cuda_ops("moe=grouped");
  Tensor og = backend->empty({1, 128});
  try {
    backend->moe_experts(gpu({1, 128}, random(128)), eg, backend->from_host_i32({1, 1}, &id), gpu({1, 1}, {wt}), og);
    ADD_FAILURE() << "forcing the grouped kernels on moe_intermediate 48 was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_intermediate 48"), std::string::npos) << e.what();
  }
}

// The whole MoE block (router, routed experts, shared expert): on the grouped path the CUDA backend
// runs the shared expert on a second stream beside the router and adds it in the combine. Checked
// against the CPU's route + experts, and against the same backend's two ops in sequence (the shared
// expert folded into the routed kernels), which at <= 4 tokens run the same kernels in the same
// summation order: those must agree bit for bit.
TEST_F(CudaOpsTest, MoeBlockWithTheSharedExpertBesideTheRouter) {
  struct Case {
    int64_t T, E, K, G, TG, H, I, shared_inter;  // shared_inter != I: the shared expert runs separately
  };
  for (const Case c :
       {Case{1, 24, 6, 1, 1, 512, 256, 256}, Case{3, 24, 6, 4, 2, 512, 256, 256}, Case{16, 40, 8, 1, 1, 256, 512, 512},
        Case{40, 16, 4, 1, 1, 512, 96, 96}, Case{2, 24, 6, 1, 1, 512, 256, 128}}) {
    const std::string label =
        fmt::format("moe T={} E={} K={} H={} I={} shared {}", c.T, c.E, c.K, c.H, c.I, c.shared_inter);
    std::vector<HostWeight> keep;
    std::vector<ops::ExpertWeights> ec, eg;
    auto add_expert = [&](int64_t inter, std::vector<ops::ExpertWeights>& cpu_list,
                          std::vector<ops::ExpertWeights>& gpu_list) {
      keep.push_back(bf16_weight(inter, c.H));
      keep.push_back(bf16_weight(inter, c.H));
      keep.push_back(bf16_weight(c.H, inter));
      const size_t b = keep.size() - 3;
      cpu_list.push_back({keep[b].w, keep[b + 1].w, keep[b + 2].w});
      gpu_list.push_back(
          {gpu_->upload_linear(keep[b].w), gpu_->upload_linear(keep[b + 1].w), gpu_->upload_linear(keep[b + 2].w)});
    };
    for (int64_t e = 0; e < c.E; ++e) add_expert(c.I, ec, eg);
    std::vector<ops::ExpertWeights> sc, sg;
    add_expert(c.shared_inter, sc, sg);
    HostWeight gate = bf16_weight(c.E, c.H, 1.0f);
    auto bias = random(c.E, 0.05f);
    for (auto& b : bias) b = std::abs(b);
    const ops::RouterConfig rc{c.E, c.K, c.G, c.TG, true, 2.5f};
    auto xv = random(c.T * c.H);
    Tensor oc = cpu_.empty({c.T, c.H});
    cpu_.moe(cpu({c.T, c.H}, xv), gate.w, cpu(core::Shape{c.E}, bias), rc, ec, &sc[0], oc);
    try {
      const ops::LinearWeight gate_g = gpu_->upload_linear(gate.w);
      const Tensor bias_g = gpu_->upload_vector(cpu(core::Shape{c.E}, bias));
      const Tensor x = gpu({c.T, c.H}, xv);
      Tensor og = gpu_->empty({c.T, c.H});
      gpu_->moe(x, gate_g, bias_g, rc, eg, &sg[0], og);
      expect_close(oc, og, 5e-3, label);
      Tensor ids = gpu_->empty_i32({c.T, c.K}), wts = gpu_->empty({c.T, c.K}), seq = gpu_->empty({c.T, c.H});
      gpu_->moe_route(x, gate_g, bias_g, rc, ids, wts);
      gpu_->moe_experts(x, eg, ids, wts, seq, &sg[0]);
      const std::vector<float> a = gpu_->to_host_f32(og), b = gpu_->to_host_f32(seq);
      if (c.T <= 4) {
        for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << label << " element " << i;
      } else {
        EXPECT_LE(test::rel_rms(a, b), 1e-3) << label << " against the two ops";
      }
    } catch (const core::Error& e) {
      FAIL() << label << ": " << e.what();  // a device error is sticky: the later cases cannot run
    }
    if (c.T != 1) continue;
    // A router config the kernels refuse (33 experts a token) is an error naming the limit, raised
    // after the shared expert was queued on the second stream; the backend then runs the next
    // block as before.
    try {
      Tensor og = gpu_->empty({c.T, c.H});
      const ops::RouterConfig bad{c.E, 33, c.G, c.TG, true, 2.5f};
      gpu_->moe(gpu({c.T, c.H}, xv), gpu_->upload_linear(gate.w), gpu_->upload_vector(cpu(core::Shape{c.E}, bias)), bad,
                eg, &sg[0], og);
      ADD_FAILURE() << label << ": 33 experts a token was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("32 experts per token"), std::string::npos) << e.what();
    }
    Tensor again = gpu_->empty({c.T, c.H});
    gpu_->moe(gpu({c.T, c.H}, xv), gpu_->upload_linear(gate.w), gpu_->upload_vector(cpu(core::Shape{c.E}, bias)), rc,
              eg, &sg[0], again);
    expect_close(oc, again, 5e-3, label + " after a refused config");
  }
}

// The names a kernel trace prints (a pure function: runs without a GPU). The mangled names are the
// device kernels' own, as CUPTI reports them.
// TESSERA_GEMM_ALGO_BUCKETS: which token count's algorithm a GEMM borrows (host only). Each
// expected bucket worked out by hand: n itself up to 64, then the octave (o, 2o] cut in four steps
// of o / 4, rounded up.
TEST(GemmAlgoColumns, ExactUpTo64ThenFourBucketsAnOctave) {
  using ops::cuda::gemm_algo_columns;
  for (int64_t n : {1, 2, 17, 63, 64}) EXPECT_EQ(gemm_algo_columns(n), n) << n;
  const std::pair<int64_t, int64_t> cases[] = {{65, 80},     {80, 80},     {81, 96},     {127, 128},   {128, 128},
                                               {129, 160},   {200, 224},   {256, 256},   {257, 320},   {1000, 1024},
                                               {1025, 1280}, {2047, 2048}, {8192, 8192}, {8193, 10240}};
  for (const auto& [n, bucket] : cases) EXPECT_EQ(gemm_algo_columns(n), bucket) << n;
  // Never below n, and at most a quarter of an octave above it.
  for (int64_t n = 65; n <= 20000; ++n) {
    const int64_t b = gemm_algo_columns(n);
    ASSERT_GE(b, n);
    ASSERT_LE(b - n, n / 4) << n;
  }
}

TEST(KernelTrace, DisplayNamesDropNamespacesAndParameters) {
  EXPECT_EQ(ops::cuda::kernel_display_name("_ZN7tessera3ops4cuda38_GLOBAL__N__4a7726d9_6_moe_cu_81d1cf6319router_"
                                           "fused_kernelILi12ELb0EEEvPKfllPK13__nv_bfloat16lPfS5_lllbfPiS9_Pj"),
            "router_fused_kernel<12, false>");
  EXPECT_EQ(ops::cuda::kernel_display_name("_ZN7tessera3ops4cuda44_GLOBAL__N__784fee8a_11_moe_gemv_cu_b04550a718expert_"
                                           "gemv_kernelILb1EEEvPK13__nv_bfloat16iiPKiS8_S8_S8_PKS6_SA_iiPS4_Pf"),
            "expert_gemv_kernel<true>");
  EXPECT_EQ(ops::cuda::kernel_display_name("my_kernel"), "my_kernel");
  EXPECT_EQ(ops::cuda::kernel_display_name(nullptr), "?");
}

// A trace's busy time: overlapping kernels count once, gaps not at all, whatever the order.
TEST(KernelTrace, BusyTimeIsTheUnionOfTheKernelsIntervals) {
  using ops::cuda::KernelSpan;
  EXPECT_EQ(ops::cuda::busy_ns({}), 0u);
  // [100, 200) and [150, 260) overlap (160 ns), a gap to [300, 310), [400, 420) inside [390, 500).
  const std::vector<KernelSpan> spans = {
      {"b", 0, 150, 260}, {"a", 0, 100, 200}, {"c", 0, 300, 310}, {"e", 0, 400, 420}, {"d", 0, 390, 500}};
  EXPECT_EQ(ops::cuda::busy_ns(spans), 160u + 10u + 110u);
  EXPECT_EQ(ops::cuda::busy_ns({{"same", 0, 5, 5}}), 0u);
}

// Totals by kernel name: while kernels overlap, each has an equal part of that time, so the shares
// add up to the busy time; calls and running time are counted per call.
TEST(KernelTrace, TotalsShareOverlapsEquallyAndSumToTheBusyTime) {
  using ops::cuda::KernelSpan;
  EXPECT_TRUE(ops::cuda::kernel_totals({}).empty());
  // gemm [100, 200) and norm [150, 260) share 50 ns; gemm [300, 310) alone; norm [400, 420) inside
  // attn [390, 500).
  const std::vector<KernelSpan> spans = {{"norm", 0, 150, 260}, {"gemm", 0, 100, 200}, {"gemm", 1, 300, 310},
                                         {"norm", 1, 400, 420}, {"attn", 0, 390, 500}, {"empty", 0, 450, 450}};
  const auto totals = ops::cuda::kernel_totals(spans);
  ASSERT_EQ(totals.size(), 4u);
  // attn: 10 alone + 20 / 2 + 80 alone; norm: 50 / 2 + 60 alone + 20 / 2; gemm: 50 alone + 50 / 2 + 10.
  EXPECT_EQ(totals[0].name, "attn");
  EXPECT_DOUBLE_EQ(totals[0].share_ns, 100.0);
  EXPECT_EQ(totals[1].name, "norm");
  EXPECT_EQ(totals[1].calls, 2);
  EXPECT_DOUBLE_EQ(totals[1].run_ns, 130.0);
  EXPECT_DOUBLE_EQ(totals[1].share_ns, 95.0);
  EXPECT_EQ(totals[2].name, "gemm");
  EXPECT_EQ(totals[2].calls, 2);
  EXPECT_DOUBLE_EQ(totals[2].run_ns, 110.0);
  EXPECT_DOUBLE_EQ(totals[2].share_ns, 85.0);
  EXPECT_EQ(totals[3].name, "empty");
  EXPECT_DOUBLE_EQ(totals[3].share_ns, 0.0);
  double sum = 0;
  for (const auto& t : totals) sum += t.share_ns;
  EXPECT_DOUBLE_EQ(sum, static_cast<double>(ops::cuda::busy_ns(spans)));
}

// The context split count: within the combine kernel's limit; at least half of the splits hold
// positions (each token's splits are equal shares of whole tiles of 64 positions for the wgmma
// kernel, 32 for the others: mla_split_chunk); and, since a recorded decode graph bakes the count
// in, it changes at most 8 times while a context doubles.
TEST(MlaSplits, CountsKeepTheSplitsBusyAndChangeRarelyAsTheContextGrows) {
  using ops::cuda::MlaKernel;
  for (MlaKernel kernel : {MlaKernel::kWgmma, MlaKernel::kKvMajor, MlaKernel::kTensorCore, MlaKernel::kCudaCore})
    for (bool pairs : {false, true})
      for (int64_t tokens : {1, 2, 16, 128})
        for (int64_t heads : {8, 64, 128})
          for (int sms : {84, 132, 170}) {
            const int tile = kernel == MlaKernel::kWgmma ? 64 : 32;
            for (int64_t ctx : {1, 100, 1024, 8192, 8193, 32768, 131072}) {
              const int64_t s = ops::cuda::mla_attend_splits(tokens, heads, ctx, sms, kernel, pairs);
              const std::string what = fmt::format("{} tokens, {} heads, ctx {}, {} SMs, kernel {}, pairs {}", tokens,
                                                   heads, ctx, sms, static_cast<int>(kernel), pairs);
              ASSERT_GE(s, 1) << what;
              EXPECT_LE(s, ops::cuda::kMlaMaxSplits) << what;
              // With wgmma pairs a split runs as two blocks of half its positions (at least half of them hold some).
              const int64_t blocks = kernel == MlaKernel::kWgmma && pairs ? 2 * s : s;
              const int64_t chunk = ops::cuda::mla_split_chunk(static_cast<int>(ctx), static_cast<int>(blocks), tile);
              EXPECT_GE(2 * ((ctx + chunk - 1) / chunk), blocks) << what << ": " << blocks << " blocks of " << chunk;
            }
            // One sequence of 64 heads at a short context (a rank's part of a sharded cache) still gets
            // many blocks: not one block reading the whole context.
            if (kernel == MlaKernel::kWgmma && tokens == 1 && heads == 64 && sms == 132) {
              EXPECT_GE(ops::cuda::mla_attend_splits(tokens, heads, 1024, sms, kernel, pairs), pairs ? 4 : 8);
              // At 8k, 64 splits of two tiles ran 22.8 us against 30.8 for 16 of eight (H200).
              EXPECT_GE(ops::cuda::mla_attend_splits(tokens, heads, 8192, sms, kernel, pairs), 32);
              // Pairs fill the SMs at 32k (128 or more blocks) where single blocks stop at 64.
              if (pairs) {
                EXPECT_GE(2 * ops::cuda::mla_attend_splits(tokens, heads, 32768, sms, kernel, pairs), 118);
              }
            }
            if (tokens != 1 || heads == 128) continue;
            for (int64_t start : {1024, 8192}) {
              int changes = 0;
              for (int64_t ctx = start + 1; ctx < 2 * start; ++ctx)
                changes += ops::cuda::mla_attend_splits(tokens, heads, ctx, sms, kernel, pairs) !=
                           ops::cuda::mla_attend_splits(tokens, heads, ctx - 1, sms, kernel, pairs);
              EXPECT_LE(changes, 8) << tokens << " tokens, " << heads << " heads, " << sms << " SMs, from " << start;
            }
          }
}

// The bf16 grouped expert kernels' tiles of 16 pairs a weight fragment: two once a step averages
// more than 8 pairs an expert (issue 19's batch 128 over 64 experts: 16), one below (the second
// tile would sit idle and cost its registers).
TEST(MoeGroupedTiles, TwoTilesOnceAnExpertAveragesMoreThanEightPairs) {
  if (core::env_value("TESSERA_MOE_GROUPED_TILES").value_or("0") != "0")
    GTEST_SKIP() << "TESSERA_MOE_GROUPED_TILES forces a count";
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(128 * 8, 64), 2);
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(256 * 8, 64), 2);
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(64 * 8, 64), 1);  // 8 an expert
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(65 * 8, 64), 2);
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(128 * 8, 384), 1);  // Kimi-K2.5's 384 experts at batch 128
  EXPECT_EQ(ops::cuda::moe_grouped_tiles(1, 64), 1);
}

// The weights-as-A expert kernels run an expert's passes of 32 pairs in parallel blocks, as many as
// the step averages passes an expert, at most 8: the shared expert alone at batch 128 in 4, the
// routed experts of issue 19's batch 128 (16 pairs an expert over 64) in one.
TEST(MoeGroupedWa, PairGroupsAreThePassesAnExpertAverages) {
  if (core::env_value("TESSERA_MOE_GROUPED_WA_PAIR_GROUPS").value_or("1") != "1")
    GTEST_SKIP() << "TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0";
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(128, 1), 4u);
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(128 * 8, 64), 1u);
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(256 * 8, 64), 1u);  // 32 an expert: one pass
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(256 * 8 + 1, 64), 2u);
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(33, 1), 2u);
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(100000, 1), 8u);  // at most 8
  EXPECT_EQ(ops::cuda::moe_wa_pair_groups(1, 1), 1u);
}

// TESSERA_MLA_DECODE_CLUSTERS: a step's splits run in clusters of the largest power of two up to
// the allowed size that divides them (a cluster must tile the grid), and the combine then reads
// splits / cluster parts.
TEST(MlaSplits, ClustersAreTheLargestPowerOfTwoThatDividesTheSplits) {
  ops::cuda::MlaDecodeLaunch how;
  how.cluster = 8;
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 256), 8);  // batch 1 at 32k: 32 parts
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 2), 2);    // batch 128 at 8k: one part, no combine
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 12), 4);
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 6), 2);
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 241), 1);
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 1), 1);
  how.cluster = 4;
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 256), 4);
  how.cluster = 1;  // off, or before sm_90
  EXPECT_EQ(ops::cuda::mla_decode_cluster(how, 256), 1);
}

}  // namespace
}  // namespace tessera
