#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

using namespace tessera::core;

TEST(DType, ParsesSafetensorsNames) {
  EXPECT_EQ(parse_safetensors_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_safetensors_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(parse_safetensors_dtype("U8"), DType::kU8);
  EXPECT_FALSE(parse_safetensors_dtype("F4").has_value());
  EXPECT_FALSE(parse_safetensors_dtype("bf16").has_value());
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
}

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.015625f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, Fp8E4M3MatchesDefinition) {
  // Values from the OCP FP8 spec: max normal 448, min normal 2^-6, min subnormal 2^-9.
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(DType, E2M1Table) {
  const float expect[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c)), expect[c]) << c;
}

TEST(DType, F16) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}
