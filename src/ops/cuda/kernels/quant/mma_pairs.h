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
// integer instructions a word (a shift, masks and a move per pair). At upload the loader maps each
// word through a fixed invertible linear map over its 32 bits (XORs of bits, nvfp4_device_word) so
// that the four pairs come from the word q and four rotations of it, each pair one masked XOR
// (LOP3): 8 integer instructions a word, where the permutation before it took 11 (3 rotations, then
// a byte permute and a mask a pair). No map from q and 3 rotations exists; a map whose rotations
// act as plain shifts on the masked bits lets ptxas issue them as IMAD.SHL, which measured slower
// (docs/PERFORMANCE.md). scripts/dev/nvfp4_xor_layout.py checks this map and shows the search.
// The map stays within a word, so rows, K offsets, scales and the ring's TMA boxes do not change,
// and the device holds as many bytes as the checkpoint.
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

// Plain C++ (constexpr: the layout's inverse is computed at compile time); the compiler emits one
// funnel shift (SHF.R.W) for it.
TESSERA_MMA_PAIRS_CONSTEXPR uint32_t rotate_right(uint32_t x, int s) { return s == 0 ? x : (x >> s) | (x << (32 - s)); }

// Sign, e1, e0 and m of both halves.
constexpr uint32_t kNvfp4PairMask = 0x81C081C0u;

// NVFP4: a device-layout word's pairs (values 2i, 2i + 1) as bf16 bits, each half its value times
// 2^-126 (bit 15 the sign, bits 8, 7, 6 e1, e0, m). With R_r = q rotated right by r: pair 0 is q,
// pair 1 R_12, pair 2 R_2 ^ R_6, pair 3 R_2 ^ R_8, each masked.
TESSERA_MMA_PAIRS_CONSTEXPR uint32_t nvfp4_pair_bits(uint32_t q, int i) {
  switch (i) {
    case 0:
      return q & kNvfp4PairMask;
    case 1:
      return rotate_right(q, 12) & kNvfp4PairMask;
    case 2:
      return (rotate_right(q, 2) ^ rotate_right(q, 6)) & kNvfp4PairMask;
    default:
      return (rotate_right(q, 2) ^ rotate_right(q, 8)) & kNvfp4PairMask;
  }
}
TESSERA_MMA_PAIRS_CONSTEXPR void nvfp4_pairs(uint32_t q, uint32_t (&bits)[4]) {
  TESSERA_MMA_PAIRS_UNROLL
  for (int i = 0; i < 4; ++i) bits[i] = nvfp4_pair_bits(q, i);
}

// The checkpoint word (value j in nibble j: bit 3 sign, bits 2-1 exponent, bit 0 mantissa) a
// device-layout word decodes to: nvfp4_pairs' bits gathered back into nibbles. Linear over GF(2).
TESSERA_MMA_PAIRS_CONSTEXPR uint32_t nvfp4_checkpoint_word(uint32_t q) {
  uint32_t bits[4] = {};
  nvfp4_pairs(q, bits);
  uint32_t w = 0;
  TESSERA_MMA_PAIRS_UNROLL
  for (int c = 0; c < 8; ++c) {
    const uint32_t half = bits[c / 2] >> (16 * (c % 2));
    w |= (((half >> 6) & 7u) | ((half >> 15) & 1u) << 3) << (4 * c);
  }
  return w;
}

// The inverse map as 32 columns: column[b] is the device word whose checkpoint word is bit b alone.
// Gauss-Jordan elimination over GF(2) on the images of the 32 unit words, at compile time.
struct Nvfp4DeviceColumns {
  uint32_t column[32];
};
TESSERA_MMA_PAIRS_CONSTEXPR Nvfp4DeviceColumns nvfp4_device_columns() {
  uint32_t image[32] = {};  // image[j]: the checkpoint word of device word source[j]
  uint32_t source[32] = {};
  for (int j = 0; j < 32; ++j) {
    image[j] = nvfp4_checkpoint_word(1u << j);
    source[j] = 1u << j;
  }
  for (int b = 0; b < 32; ++b) {  // make image[b] = 1 << b
    int pivot = b;
    while (pivot < 32 && ((image[pivot] >> b) & 1u) == 0) ++pivot;
    if (pivot == 32) return {};  // not invertible: all zero, which the static_assert below rejects
    const uint32_t ti = image[pivot], ts = source[pivot];
    image[pivot] = image[b];
    source[pivot] = source[b];
    image[b] = ti;
    source[b] = ts;
    for (int j = 0; j < 32; ++j) {
      if (j != b && ((image[j] >> b) & 1u) != 0) {
        image[j] ^= image[b];
        source[j] ^= source[b];
      }
    }
  }
  Nvfp4DeviceColumns r = {};
  for (int b = 0; b < 32; ++b) r.column[b] = source[b];
  return r;
}

static_assert(nvfp4_device_columns().column[31] != 0, "nvfp4_pair_bits must be an invertible map of a word's bits");

// A checkpoint word in the device layout: the XOR of the columns of its set bits.
TESSERA_MMA_PAIRS_FN uint32_t nvfp4_device_word(uint32_t w) {
  constexpr Nvfp4DeviceColumns kColumns = nvfp4_device_columns();
  uint32_t q = 0;
  TESSERA_MMA_PAIRS_UNROLL
  for (int b = 0; b < 32; ++b) q ^= kColumns.column[b] & (0u - ((w >> b) & 1u));
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
