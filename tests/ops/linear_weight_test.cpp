// Weight-format decoding against values computed by hand from the format definitions
// (shared/reference/formats.md), and the CPU linear against a plain double-precision loop.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/linear_weight.h"

namespace tessera {
namespace {

using core::DType;
using core::Tensor;

TEST(LinearWeight, Nvfp4FirstElementIsTheLowNibble) {
  // One row of 32 elements = 2 groups of 16. Byte 0x71: element 0 = code 1 (0.5), element 1 = code 7 (6.0).
  // Byte 0xA9: element 2 = code 9 (-0.5), element 3 = code 0xA (-1.0).
  ops::LinearWeight w;
  w.format = ops::LinearWeight::Format::kNvfp4;
  w.out = 1;
  w.in = 32;
  w.group_size = 16;
  std::vector<uint8_t> packed(16, 0);
  packed[0] = 0x71;
  packed[1] = 0xA9;
  packed[8] = 0x0F;  // group 1, element 16 = code 0xF (-6), element 17 = 0
  std::vector<uint8_t> scales = {0x38 /* e4m3 1.0 */, 0x40 /* e4m3 2.0 */};
  w.weight = Tensor::view(DType::kU8, {1, 16}, packed.data());
  w.scale = Tensor::view(DType::kF8E4M3, {1, 2}, scales.data());
  w.global_scale = 0.25f;
  std::vector<float> row(32);
  w.dequant_row(0, row.data());
  EXPECT_EQ(row[0], 0.5f * 1.0f * 0.25f);
  EXPECT_EQ(row[1], 6.0f * 0.25f);
  EXPECT_EQ(row[2], -0.5f * 0.25f);
  EXPECT_EQ(row[3], -1.0f * 0.25f);
  EXPECT_EQ(row[16], -6.0f * 2.0f * 0.25f);
  EXPECT_EQ(row[17], 0.0f);
}

TEST(LinearWeight, Fp8BlockScalesApplyPer128x128Block) {
  // 130 x 260 weight: 2 x 3 scale blocks (the last ones partial).
  const int64_t out = 130, in = 260;
  std::vector<uint8_t> w(static_cast<size_t>(out * in), 0x38);  // every element 1.0
  std::vector<float> s = {1, 2, 3, 4, 5, 6};
  ops::LinearWeight lw;
  lw.format = ops::LinearWeight::Format::kFp8Block;
  lw.out = out;
  lw.in = in;
  lw.weight = Tensor::view(DType::kF8E4M3, {out, in}, w.data());
  lw.scale = Tensor::view(DType::kF32, {2, 3}, s.data());
  std::vector<float> row(static_cast<size_t>(in));
  lw.dequant_row(0, row.data());
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[127], 1.0f);
  EXPECT_EQ(row[128], 2.0f);
  EXPECT_EQ(row[259], 3.0f);
  lw.dequant_row(129, row.data());
  EXPECT_EQ(row[0], 4.0f);
  EXPECT_EQ(row[200], 5.0f);
  EXPECT_EQ(row[256], 6.0f);
}

TEST(CpuLinear, MatchesDoublePrecisionOnRandomBf16Weights) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd;
  const int64_t T = 5, in = 67, out = 33;
  std::vector<uint16_t> wbits(static_cast<size_t>(out * in));
  for (auto& b : wbits) b = core::f32_to_bf16(nd(rng));
  ops::LinearWeight w;
  w.out = out;
  w.in = in;
  w.weight = Tensor::view(DType::kBF16, {out, in}, wbits.data());
  ops::cpu::CpuOps o;
  Tensor x = o.empty({T, in});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = nd(rng);
  Tensor y = o.empty({T, out});
  o.linear(x, w, y);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < out; ++r) {
      double ref = 0;
      for (int64_t k = 0; k < in; ++k)
        ref += static_cast<double>(x.data<float>()[t * in + k]) *
               core::bf16_to_f32(wbits[static_cast<size_t>(r * in + k)]);
      EXPECT_NEAR(y.data<float>()[t * out + r], ref, 1e-4 * (1 + std::abs(ref)));
    }
}

TEST(CpuRoute, GroupLimitedTopKUsesBiasForSelectionOnly) {
  // 4 experts in 2 groups, top-2 experts from the top-1 group. The bias pushes group 1 ahead;
  // the weights are the unbiased sigmoids, normalised, times the scaling factor.
  ops::cpu::CpuOps o;
  const int64_t E = 4, H = 4;
  std::vector<float> gate_w = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // logits = x
  ops::LinearWeight gate;
  gate.out = E;
  gate.in = H;
  gate.weight = Tensor::view(DType::kF32, {E, H}, gate_w.data());
  std::vector<float> bias = {0, 0, 0.5f, 0.5f};
  Tensor x = o.empty({1, H});
  const float logits[4] = {2.0f, 1.5f, 0.5f, 0.2f};
  std::copy(logits, logits + 4, x.data<float>());
  Tensor ids = Tensor::zeros(DType::kI32, {1, 2}), wts = Tensor::zeros(DType::kF32, {1, 2});
  ops::RouterConfig rc{E, 2, 2, 1, true, 2.5f};
  o.moe_route(x, gate, Tensor::view(DType::kF32, {E}, bias.data()), rc, ids, wts);
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  // Group scores (biased): g0 = sig(2)+sig(1.5) = 1.699, g1 = sig(.5)+.5 + sig(.2)+.5 = 2.172 -> group 1.
  std::set<int32_t> chosen = {ids.data<int32_t>()[0], ids.data<int32_t>()[1]};
  EXPECT_EQ(chosen, (std::set<int32_t>{2, 3}));
  const double s2 = sig(0.5), s3 = sig(0.2);
  for (int k = 0; k < 2; ++k) {
    const double expect = (ids.data<int32_t>()[k] == 2 ? s2 : s3) / (s2 + s3) * 2.5;
    EXPECT_NEAR(wts.data<float>()[k], expect, 1e-6);
  }
}

}  // namespace
}  // namespace tessera
