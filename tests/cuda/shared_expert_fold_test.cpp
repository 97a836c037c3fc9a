// Which shared experts may ride in the routed experts' quantized table as one more expert
// (TESSERA_SHARED_EXPERT_FOLD=1, cuda/moe.cpp): host-only, so these run in CI. The expected answers
// are DeepSeek-V3 FP8's and Kimi-K2.5 NVFP4's stored shapes, worked out from the checkpoint layouts
// (docs/ARCHITECTURE.md; ../shared/reference/formats.md).
#include <gtest/gtest.h>

#include <array>

#include "ops/cuda/moe.h"

namespace tessera {
namespace {

using ops::cuda::QuantFormat;
using ops::cuda::QuantMatrix;
using Expert = std::array<QuantMatrix, 3>;  // gate, up, down

QuantMatrix fp8(int32_t n, int32_t k) {
  QuantMatrix m;
  m.format = QuantFormat::kFp8Block;
  m.n = n;
  m.k = k;
  m.scale_cols = (k + 127) / 128;
  return m;
}
QuantMatrix nvfp4(int32_t n, int32_t k) {
  QuantMatrix m;
  m.format = QuantFormat::kNvfp4;
  m.n = n;
  m.k = k;
  m.scale_cols = k / 16;
  return m;
}
// An expert of hidden 7168 and `inter` intermediate columns.
Expert fp8_expert(int32_t inter) { return {fp8(inter, 7168), fp8(inter, 7168), fp8(7168, inter)}; }
Expert nvfp4_expert(int32_t inter) { return {nvfp4(inter, 7168), nvfp4(inter, 7168), nvfp4(7168, inter)}; }

TEST(SharedExpertFold, DeepSeekV3Fp8SharedExpertFitsTheRoutedTable) {
  EXPECT_TRUE(ops::cuda::shared_expert_fits_routed_table(fp8_expert(2048), fp8_expert(2048), 256));
}

TEST(SharedExpertFold, ATensorParallelRanksSliceDoesNot) {
  // Rank 1 of 4 holds 512 of the shared expert's 2048 columns; the routed experts stay whole.
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(fp8_expert(512), fp8_expert(2048), 256));
}

TEST(SharedExpertFold, AnotherFormatOrBlockDoesNot) {
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(nvfp4_expert(2048), fp8_expert(2048), 256));
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(fp8_expert(2048), nvfp4_expert(2048), 384));
  Expert other_blocks = fp8_expert(2048);
  other_blocks[2].block_rows = 64;  // the down projection's scales per 64 rows
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(other_blocks, fp8_expert(2048), 256));
  Expert other_scales = nvfp4_expert(2048);
  other_scales[0].scale_cols = 7168 / 32;
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(other_scales, nvfp4_expert(2048), 384));
}

TEST(SharedExpertFold, NvFp4SharedExpertOfTheSameShapeFits) {
  // Kimi-K2.5's checkpoint keeps its shared expert in bf16 (never folded), but an NVFP4 one of the
  // routed shape would be.
  EXPECT_TRUE(ops::cuda::shared_expert_fits_routed_table(nvfp4_expert(2048), nvfp4_expert(2048), 384));
}

TEST(SharedExpertFold, TheTableWithTheSharedExpertStaysWithinTheKernelsLimit) {
  // The quantized grouped kernels sort the pairs of at most 1024 experts.
  EXPECT_TRUE(ops::cuda::shared_expert_fits_routed_table(fp8_expert(2048), fp8_expert(2048), 1023));
  EXPECT_FALSE(ops::cuda::shared_expert_fits_routed_table(fp8_expert(2048), fp8_expert(2048), 1024));
}

}  // namespace
}  // namespace tessera
