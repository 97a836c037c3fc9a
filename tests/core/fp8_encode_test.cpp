// f32 -> fp8 e4m3 encoder (core::f32_to_fp8_e4m3) against an oracle that does not share its code:
// the nearest of the 254 finite e4m3 values found by search, ties to the even code. Covers every
// code round-tripping, ties (normal, subnormal, across a power of two), underflow and saturation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "core/dtype.h"

using namespace tessera::core;

namespace {

// Nearest finite e4m3 code of the sign of x (|x| clamps to 448 since nothing lies beyond), ties to
// the code with an even last bit. Values compared in double, which holds every f32 and e4m3 value
// and their midpoints exactly.
uint8_t oracle(float x) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(static_cast<double>(fp8_e4m3_to_f32(static_cast<uint8_t>(c))) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (neg ? 0x80 : 0));
}

TEST(Fp8E4M3Encode, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // the two NaNs
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_fp8_e4m3(v), c) << "code " << c << " value " << v;
  }
}

TEST(Fp8E4M3Encode, MidpointsTieToEvenAndNeighboursGoToTheNearer) {
  for (int sign : {0, 0x80})
    for (int c = 0; c < 0x7e; ++c) {
      const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(c | sign));
      const float hi = fp8_e4m3_to_f32(static_cast<uint8_t>((c + 1) | sign));
      const float mid = (lo + hi) / 2;  // exact: both have at most 4 significant bits
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(f32_to_fp8_e4m3(mid), even | sign) << "midpoint of codes " << c << " and " << c + 1;
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, lo)), c | sign) << "just below midpoint " << mid;
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, hi)), (c + 1) | sign) << "just above midpoint " << mid;
    }
}

TEST(Fp8E4M3Encode, SubnormalsAndUnderflow) {
  const float q = std::ldexp(1.0f, -9);  // the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(q), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(q / 2), 0x00);  // tie: to even (zero)
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(q / 2, 1.0f)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(-q / 2), 0x80);                                    // underflow keeps the sign
  EXPECT_EQ(f32_to_fp8_e4m3(1.5f * q), 0x02);                                  // tie between 1 and 2
  EXPECT_EQ(f32_to_fp8_e4m3(2.5f * q), 0x02);                                  // tie between 2 and 3
  EXPECT_EQ(f32_to_fp8_e4m3(7.5f * q), 0x08);                                  // tie into the normals
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);  // f32 subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Fp8E4M3Encode, SaturatesAndNeverMakesNaNFromNumbers) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, std::nextafter(464.0f, inf), 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

TEST(Fp8E4M3Encode, RandomValuesMatchTheOracle) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-14, 10);  // below the subnormals up to past saturation
  for (int i = 0; i < 100000; ++i) {
    float x = std::ldexp(mant(rng), expo(rng));
    if (i & 1) x = -x;
    ASSERT_EQ(f32_to_fp8_e4m3(x), oracle(x)) << "x = " << x;
  }
}

}  // namespace
