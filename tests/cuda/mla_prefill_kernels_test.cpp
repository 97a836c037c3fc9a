// The MLA prefill attention kernels called directly (mla_prefill_kernels.h), against a double
// precision reference over the same bf16 operands: the mma.sync kernel (64- and 128-row blocks)
// and, on a Hopper GPU with sm_90a code, the warpgroup-MMA kernel, at DeepSeek-V3's head dims. One
// prompt from scratch, one after a cached prefix, and the same in two slices that carry the softmax
// state. On a mismatch the errors are reported by 16-row group of the block and by 8-column group of
// the output, which tells a fragment-layout or swizzle fault from a masking one in one run.
// Skips itself without a GPU.
//
// Tolerance: P is rounded to bf16 in the kernels (the reference keeps it exact): rel_rms <= 1e-2
// over the prompt and 2.5e-2 for the worst row (MlaPrefillTest's bf16 tolerances).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "support/require_gpu.h"

namespace tessera {
namespace {

using ops::cuda::PrefillAttendArgs;
using ops::cuda::PrefillChunk;
using ops::cuda::PrefillTile;

constexpr int kHeads = 3, kNope = 128, kRope = 64, kV = 128, kLatent = 512, kEntry = kLatent + kRope;
constexpr int kQk = kNope + kRope, kKvWidth = kHeads * (kNope + kV);
constexpr float kScale = 0.0721687836f;

template <class T>
struct Device {
  T* p = nullptr;
  explicit Device(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  Device(const std::vector<T>& h) : Device(h.size()) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  std::vector<T> host(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// A prompt of n_q new tokens after `start` cached ones; its context [0, start + n_q) is held whole
// in the pass buffers (position p at row p), attended in slices [0, cut) and [cut, end) (cut = end:
// one slice).
struct Case {
  const char* name;
  int start, n_q, cut;
};

class MlaPrefillKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  }

  void build(const Case& c) {
    c_ = c;
    const int ctx = c.start + c.n_q;
    std::mt19937_64 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    q_.assign(static_cast<size_t>(c.n_q) * kHeads * kQk, 0.0f);
    for (auto& x : q_) x = 0.9f * nd(rng);
    lat_.assign(static_cast<size_t>(ctx) * kEntry, 0);
    kv_.assign(static_cast<size_t>(ctx) * kKvWidth, 0);
    for (auto& x : lat_) x = core::f32_to_bf16(nd(rng));
    for (auto& x : kv_) x = core::f32_to_bf16(nd(rng));
  }

  // out [n_q, heads, v] by the reference: q's operands rounded to bf16 as the kernels do.
  std::vector<double> reference() const {
    const int ctx = c_.start + c_.n_q;
    std::vector<double> out(static_cast<size_t>(c_.n_q) * kHeads * kV, 0.0);
    std::vector<double> s(static_cast<size_t>(ctx));
    for (int i = 0; i < c_.n_q; ++i)
      for (int h = 0; h < kHeads; ++h) {
        const float* q = q_.data() + (static_cast<size_t>(i) * kHeads + h) * kQk;
        const int keys = c_.start + i + 1;
        double mx = -1e300;
        for (int j = 0; j < keys; ++j) {
          double dot = 0;
          for (int d = 0; d < kNope; ++d)
            dot += double(core::round_to_bf16(q[d])) * core::bf16_to_f32(kv_[size_t(j) * kKvWidth + h * 256 + d]);
          for (int d = 0; d < kRope; ++d)
            dot +=
                double(core::round_to_bf16(q[kNope + d])) * core::bf16_to_f32(lat_[size_t(j) * kEntry + kLatent + d]);
          s[size_t(j)] = dot * kScale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int j = 0; j < keys; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
        double* o = out.data() + (static_cast<size_t>(i) * kHeads + h) * kV;
        for (int j = 0; j < keys; ++j)
          for (int d = 0; d < kV; ++d)
            o[d] += s[size_t(j)] / sum * core::bf16_to_f32(kv_[size_t(j) * kKvWidth + h * 256 + kNope + d]);
      }
    return out;
  }

  // The kernel's output: wgmma (128-row tiles) or mma.sync with `rows`-row tiles.
  std::vector<float> run(bool wgmma, int rows) const {
    const int ctx = c_.start + c_.n_q;
    std::vector<PrefillChunk> chunks;
    const int cuts[3] = {0, c_.cut, ctx};
    for (int s = 0; s < 2; ++s) {
      if (cuts[s] == cuts[s + 1]) continue;
      const int32_t flags = (s == 0 ? ops::cuda::kChunkFirst : 0) | (cuts[s + 1] == ctx ? ops::cuda::kChunkLast : 0);
      chunks.push_back({0, c_.n_q, c_.start, cuts[s], cuts[s + 1], cuts[s], 0, flags});
    }
    std::vector<PrefillTile> tiles;
    for (int q0 = 0; q0 < c_.n_q; q0 += rows) tiles.push_back({0, q0});
    Device<float> q(q_), out(static_cast<size_t>(c_.n_q) * kHeads * kV), ml(static_cast<size_t>(c_.n_q) * kHeads * 2);
    Device<uint16_t> lat(lat_), kv(kv_);
    Device<PrefillTile> d_tiles(tiles);
    // One launch a slice, in order, as the host path runs passes.
    for (const PrefillChunk& ch : chunks) {
      Device<PrefillChunk> d_chunk(std::vector<PrefillChunk>{ch});
      PrefillAttendArgs a{q.p,
                          reinterpret_cast<const __nv_bfloat16*>(lat.p),
                          reinterpret_cast<const __nv_bfloat16*>(kv.p),
                          nullptr,
                          false,
                          d_chunk.p,
                          d_tiles.p,
                          out.p,
                          ml.p,
                          kHeads,
                          kNope,
                          kRope,
                          kV,
                          kLatent,
                          kScale,
                          1.0f,
                          rows};
      if (wgmma)
        ops::cuda::launch_mla_prefill_attend_wgmma(a, static_cast<int64_t>(tiles.size()), nullptr);
      else
        ops::cuda::launch_mla_prefill_attend(a, static_cast<int64_t>(tiles.size()), nullptr);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    return out.host(static_cast<size_t>(c_.n_q) * kHeads * kV);
  }

  // rel_rms over the prompt and the worst row; on failure, the errors by 16-row group of the
  // kernel's block and by 8-column group of v.
  void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                    int rows) const {
    double num = 0, den = 0, worst = 0;
    int worst_row = -1;
    std::vector<double> by_group(static_cast<size_t>(rows / 16), 0.0), by_cols(kV / 8, 0.0);
    for (int i = 0; i < c_.n_q; ++i)
      for (int h = 0; h < kHeads; ++h) {
        double rn = 0, rd = 0;
        for (int d = 0; d < kV; ++d) {
          const size_t at = (static_cast<size_t>(i) * kHeads + h) * kV + static_cast<size_t>(d);
          const double e = double(got[at]) - want[at];
          rn += e * e;
          rd += want[at] * want[at];
          by_group[static_cast<size_t>((i % rows) / 16)] += e * e;
          by_cols[static_cast<size_t>(d / 8)] += e * e;
        }
        num += rn;
        den += rd;
        const double r = std::sqrt(rn / std::max(rd, 1e-30));
        if (!(r <= worst)) {
          worst = r;
          worst_row = i;
        }
      }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    std::printf("%s: rel_rms %.2e, worst row %.2e (query %d)\n", what.c_str(), rel, worst, worst_row);
    const bool ok = rel <= 1e-2 && worst <= 2.5e-2;
    EXPECT_TRUE(ok) << what << ": rel_rms " << rel << ", worst row " << worst << " (query " << worst_row << ")";
    if (!ok) {
      std::string g = "  squared error by 16-row group of the block:", col = "  by 8-column group of v:";
      for (double e : by_group) g += " " + std::to_string(e).substr(0, 8);
      for (double e : by_cols) col += " " + std::to_string(e).substr(0, 8);
      std::printf("%s\n%s\n", g.c_str(), col.c_str());
    }
  }

  Case c_{};
  std::vector<float> q_;
  std::vector<uint16_t> lat_, kv_;
};

const Case kCases[] = {{"300 tokens from scratch", 0, 300, 300},
                       {"200 tokens after 70 cached", 70, 200, 270},
                       {"the same in two slices, cut at 150", 70, 200, 150},
                       {"129 tokens, a cut at 64", 0, 129, 64}};

TEST_F(MlaPrefillKernelsTest, MmaKernelMatchesTheReference) {
  for (const Case& c : kCases) {
    build(c);
    const auto want = reference();
    for (int rows : {64, 128})
      expect_close(std::string(c.name) + ", mma.sync " + std::to_string(rows) + " rows", run(false, rows), want, rows);
  }
}

TEST_F(MlaPrefillKernelsTest, WgmmaKernelMatchesTheReference) {
  const ops::cuda::DeviceCaps caps = ops::cuda::query_device_caps();
  if (!(caps.sm == 90 && ops::cuda::has_sm90a_code())) GTEST_SKIP() << "not an SM90 GPU with sm_90a code";
  for (const Case& c : kCases) {
    build(c);
    expect_close(std::string(c.name) + ", wgmma", run(true, 128), reference(), 128);
  }
}

}  // namespace
}  // namespace tessera
