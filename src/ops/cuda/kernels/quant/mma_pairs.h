// How a 32-bit word of quantized codes becomes the bf16 pairs the tensor-core kernels feed the MMA,
// in consecutive K order: pair i holds values 2i and 2i + 1 of the word's run (the low half the
// first), the order 16 bytes of bf16 activations already have, so the activations need no permutes.
// Plain C++ for host and device: the loader repacks with it, the host tests check it against the
// CPU backend's codecs, the kernels decode with it.
//
// A code's bits under a bf16 exponent give the value times a power of two, which the kernels make
// exact with one bf16 multiply (mma_tiles.cuh):
//   NVFP4 e2m1 (s e1 e0 m): sign at bit 15, e1 e0 m at bits 8, 7, 6: the value times 2^-126;
//   FP8 e4m3 (s eeee mmm):  sign at bit 15, eeee mmm at bits 10-4:     the value times 2^-120.
//
// NVFP4's device layout. The checkpoint packs value j of a word in nibble j, which decodes in ~16
// integer instructions a word (a shift, masks and a move per pair). At upload the loader permutes
// each word's 32 bits (nvfp4_device_word) so that 3 rotations of the word, then one byte permute
// (PRMT) and one mask (LOP3) a pair give the four pairs: 11 instructions. With R0 = q and R1, R2,
// R3 = q rotated right by 1, 4, 5, every byte of R0 and R2 can give a half its low byte (m, e0 at
// bits 6, 7) and every byte of R1 and R3 its high byte (e1, sign at bits 0, 7), each bit of q used
// once (scripts/dev/nvfp4_prmt_layout.py finds the rotations). The permutation stays within a word,
// so rows, K offsets, scales and the ring's TMA boxes do not change.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_MMA_PAIRS_FN __host__ __device__ __forceinline__
#define TESSERA_MMA_PAIRS_CONSTEXPR __host__ __device__ constexpr
#else
#define TESSERA_MMA_PAIRS_FN inline
#define TESSERA_MMA_PAIRS_CONSTEXPR constexpr
#endif
#if defined(__CUDA_ARCH__)
#define TESSERA_MMA_PAIRS_UNROLL _Pragma("unroll")
#else
#define TESSERA_MMA_PAIRS_UNROLL
#endif

namespace tessera::ops::cuda::mma_pairs {

// PRMT without sign replication: byte i of the result is byte (sel >> 4i) & 7 of {b, a} (a bytes
// 0-3, b bytes 4-7).
TESSERA_MMA_PAIRS_FN uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t src = static_cast<uint64_t>(a) | static_cast<uint64_t>(b) << 32;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
#endif
}

TESSERA_MMA_PAIRS_FN uint32_t rotate_right(uint32_t x, int s) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(x, x, s);
#else
  return s == 0 ? x : (x >> s) | (x << (32 - s));
#endif
}

// The PRMT selector that takes bytes j and j + 1 of a (low roles) and of b (high roles) into the
// halves of one pair: (a.j, b.j, a.j+1, b.j+1).
TESSERA_MMA_PAIRS_CONSTEXPR uint32_t pair_selector(uint32_t j) {
  return j | (4 + j) << 4 | (j + 1) << 8 | (4 + j + 1) << 12;
}

// Sign, e1, e0 and m of both halves.
constexpr uint32_t kNvfp4PairMask = 0x81C081C0u;

// NVFP4: a device-layout word's pairs (values 2i, 2i + 1) as bf16 bits, each half its value times
// 2^-126.
// Pairs 0, 1 come from (R0, R1), pairs 2, 3 from (R2, R3); the compiler shares the rotations
// between the pairs of one word.
TESSERA_MMA_PAIRS_FN uint32_t nvfp4_pair_bits(uint32_t q, int i) {
  const int rot = i < 2 ? 0 : 4;
  return byte_perm(rotate_right(q, rot), rotate_right(q, rot + 1), pair_selector(2 * (i % 2))) & kNvfp4PairMask;
}
TESSERA_MMA_PAIRS_FN void nvfp4_pairs(uint32_t q, uint32_t (&bits)[4]) {
  TESSERA_MMA_PAIRS_UNROLL
  for (int i = 0; i < 4; ++i) bits[i] = nvfp4_pair_bits(q, i);
}

// Where value c's bits (m, e0, e1, sign) lie in a device-layout word: nvfp4_pairs read backwards.
// Pair i = c / 2 comes from registers (R0, R1) for i < 2, else (R2, R3), bytes j = 2 (i % 2) and
// j + 1 (half c % 2); a byte's low role reads bits 6, 7 of its register, the high role bits 0, 7.
struct Nvfp4BitPlaces {
  int m, e0, e1, sign;
};
TESSERA_MMA_PAIRS_CONSTEXPR Nvfp4BitPlaces nvfp4_bit_places(int c) {
  const int i = c / 2, half = c % 2;
  const int low_rot = i < 2 ? 0 : 4, high_rot = i < 2 ? 1 : 5;  // rotations of the pair's registers
  const int byte = 8 * (2 * (i % 2) + half);
  return {(byte + 6 + low_rot) % 32, (byte + 7 + low_rot) % 32, (byte + 0 + high_rot) % 32, (byte + 7 + high_rot) % 32};
}

// A checkpoint word (value j in nibble j: bit 3 sign, bits 2-1 exponent, bit 0 mantissa) in the
// device layout.
TESSERA_MMA_PAIRS_FN uint32_t nvfp4_device_word(uint32_t w) {
  uint32_t q = 0;
  TESSERA_MMA_PAIRS_UNROLL
  for (int c = 0; c < 8; ++c) {
    const uint32_t nib = (w >> (4 * c)) & 0xfu;
    const Nvfp4BitPlaces p = nvfp4_bit_places(c);
    q |= (nib & 1u) << p.m | ((nib >> 1) & 1u) << p.e0 | ((nib >> 2) & 1u) << p.e1 | ((nib >> 3) & 1u) << p.sign;
  }
  return q;
}

// The e4m3 bytes 1 and 3 of p as the bf16 bits of a pair, each half its value times 2^-120: a byte
// as a half's high byte, shifted right by 4 under the sign (bytes 0 and 2 are masked off).
TESSERA_MMA_PAIRS_FN uint32_t e4m3_halves(uint32_t p) { return (p & 0x80008000u) | ((p >> 4) & 0x07f007f0u); }

// FP8: the 8 e4m3 values of x (bytes 0-3) and y (4-7) as bf16 bits of pairs (2i, 2i + 1), each half
// its value times 2^-120. The PRMT puts value 2i in byte 1 and 2i + 1 in byte 3.
TESSERA_MMA_PAIRS_FN void fp8_pairs(uint32_t x, uint32_t y, uint32_t (&bits)[4]) {
  TESSERA_MMA_PAIRS_UNROLL
  for (uint32_t i = 0; i < 4; ++i) bits[i] = e4m3_halves(byte_perm(x, y, (2 * i) << 4 | (2 * i + 1) << 12));
}

// NVFP4: a lane's two e4m3 group scales of a K block (bytes 0 and 1 of sc) as the bf16 bits of the
// pair (scale 0, scale 1), each times 2^-120 (exact, subnormal scales included).
TESSERA_MMA_PAIRS_FN uint32_t nvfp4_scale_pair(uint32_t sc) { return e4m3_halves(byte_perm(sc, 0u, 0x1404u)); }

}  // namespace tessera::ops::cuda::mma_pairs

#undef TESSERA_MMA_PAIRS_FN
#undef TESSERA_MMA_PAIRS_CONSTEXPR
#undef TESSERA_MMA_PAIRS_UNROLL
