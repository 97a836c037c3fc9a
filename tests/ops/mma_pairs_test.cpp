// The bf16 pairs the quantized tensor-core kernels decode from a word of codes
// (ops/cuda/kernels/quant/mma_pairs.h), checked on the host against the CPU backend's codecs
// (core::e2m1_to_f32, core::fp8_e4m3_to_f32): NVFP4 words repacked as the loader repacks them, and
// FP8 words as the checkpoint stores them, give pair i = values 2i and 2i + 1 of the word's run, the
// order of the activations the kernels multiply them with. The kernels run the same functions on a
// GPU (run.sh tests).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "core/dtype.h"
#include "ops/cuda/kernels/quant/mma_pairs.h"

namespace tessera {
namespace {

namespace mp = ops::cuda::mma_pairs;

// The bf16 bits of value x 2^shift (exact for these codes: at most 4 significant bits, and the
// smallest, 2^-129, still lands on a bf16 subnormal bit).
uint32_t bf16_bits(float value, int shift) {
  const uint32_t f = std::bit_cast<uint32_t>(std::ldexp(value, shift));
  EXPECT_EQ(f & 0xffffu, 0u) << value << " x 2^" << shift << " is not exact in bf16";
  return f >> 16;
}

// -0 decodes to the bits of -0 (sign alone), which std::ldexp keeps.
TEST(MmaPairs, Nvfp4DeviceWordsDecodeToConsecutivePairsOfTheCheckpointValues) {
  std::mt19937 rng(7);
  auto check = [](uint32_t w) {
    uint32_t bits[4];
    mp::nvfp4_pairs(mp::nvfp4_device_word(w), bits);
    for (int i = 0; i < 4; ++i) {
      const float lo = core::e2m1_to_f32(static_cast<uint8_t>((w >> (8 * i)) & 0xf));
      const float hi = core::e2m1_to_f32(static_cast<uint8_t>((w >> (8 * i + 4)) & 0xf));
      const uint32_t want = bf16_bits(lo, -126) | bf16_bits(hi, -126) << 16;
      ASSERT_EQ(bits[i], want) << std::hex << "word 0x" << w << ", pair " << i;
    }
  };
  // Every code in every position, then random words.
  for (uint32_t code = 0; code < 16; ++code)
    for (int c = 0; c < 8; ++c) check(code << (4 * c));
  for (int n = 0; n < 200000; ++n) check(rng());
}

// The repack is an invertible linear map of a word's 32 bits: every checkpoint word comes back
// from its device word, so the device holds exactly the checkpoint's information in as many bytes.
// The unit words' images are checked independent (rank 32) by elimination here, apart from the
// compile-time inverse the loader uses.
TEST(MmaPairs, Nvfp4DeviceLayoutIsAnInvertibleLinearMapOfTheWordsBits) {
  uint32_t basis[32] = {};
  for (int b = 0; b < 32; ++b) {
    uint32_t x = mp::nvfp4_device_word(1u << b);
    ASSERT_NE(x, 0u) << "checkpoint bit " << b;
    while (x != 0 && basis[31 - std::countl_zero(x)] != 0) x ^= basis[31 - std::countl_zero(x)];
    ASSERT_NE(x, 0u) << "checkpoint bit " << b << " maps into the span of the bits before it";
    basis[31 - std::countl_zero(x)] = x;
  }
  std::mt19937 rng(5);
  for (int n = 0; n < 100000; ++n) {
    const uint32_t a = rng(), b = rng();
    ASSERT_EQ(mp::nvfp4_device_word(a ^ b), mp::nvfp4_device_word(a) ^ mp::nvfp4_device_word(b));
    ASSERT_EQ(mp::nvfp4_checkpoint_word(mp::nvfp4_device_word(a)), a) << std::hex << "word 0x" << a;
  }
}

TEST(MmaPairs, Fp8WordsDecodeToConsecutivePairs) {
  std::mt19937 rng(11);
  for (int n = 0; n < 200000; ++n) {
    uint32_t xy[2] = {static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())};
    // NaN codes (0x7f, 0xff) never come out of the checkpoint writer's or a real checkpoint's
    // weights; the decode turns them into large numbers, as every kernel of these layouts does.
    for (uint32_t& v : xy)
      for (int b = 0; b < 4; ++b)
        if (((v >> (8 * b)) & 0x7f) == 0x7f) v ^= 1u << (8 * b);
    uint32_t bits[4];
    mp::fp8_pairs(xy[0], xy[1], bits);
    for (int i = 0; i < 4; ++i) {
      const uint32_t word = xy[i / 2];
      const int byte = 2 * (i % 2);
      const float lo = core::fp8_e4m3_to_f32(static_cast<uint8_t>(word >> (8 * byte)));
      const float hi = core::fp8_e4m3_to_f32(static_cast<uint8_t>(word >> (8 * byte + 8)));
      const uint32_t want = bf16_bits(lo, -120) | bf16_bits(hi, -120) << 16;
      ASSERT_EQ(bits[i], want) << std::hex << "words 0x" << xy[0] << " 0x" << xy[1] << ", pair " << i;
    }
  }
}

// NVFP4's group scales: every pair of e4m3 bytes (but NaN) decodes to both values times 2^-120,
// subnormal scales included; the byte above them is ignored.
TEST(MmaPairs, Nvfp4GroupScalesDecodeInPairs) {
  for (uint32_t s0 = 0; s0 < 256; ++s0) {
    for (uint32_t s1 = 0; s1 < 256; ++s1) {
      if ((s0 & 0x7f) == 0x7f || (s1 & 0x7f) == 0x7f) continue;
      const uint32_t bits = mp::nvfp4_scale_pair(s0 | s1 << 8 | 0xA5u << 16);
      const uint32_t want = bf16_bits(core::fp8_e4m3_to_f32(static_cast<uint8_t>(s0)), -120) |
                            bf16_bits(core::fp8_e4m3_to_f32(static_cast<uint8_t>(s1)), -120) << 16;
      ASSERT_EQ(bits, want) << std::hex << "scales 0x" << s0 << " 0x" << s1;
    }
  }
}

// The host emulation of PRMT against the instruction's definition on fixed cases (the device
// branch is the instruction itself).
TEST(MmaPairs, BytePermPicksTheSelectedBytes) {
  EXPECT_EQ(mp::byte_perm(0x33221100u, 0x77665544u, 0x3210u), 0x33221100u);
  EXPECT_EQ(mp::byte_perm(0x33221100u, 0x77665544u, 0x7654u), 0x77665544u);
  EXPECT_EQ(mp::byte_perm(0x33221100u, 0x77665544u, 0x4051u), 0x44005511u);
  EXPECT_EQ(mp::rotate_right(0x80000001u, 1), 0xC0000000u);
  EXPECT_EQ(mp::rotate_right(0x12345678u, 4), 0x81234567u);
}

}  // namespace
}  // namespace tessera
