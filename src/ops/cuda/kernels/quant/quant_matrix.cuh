// Reading weights in their checkpoint format inside a kernel (W8A16 / W4A16): a lane loads 16
// bytes of one weight row and turns them into fp32 values in registers, scaled down by a power of
// two that its group scale carries back (so the conversion is a few integer operations, exact):
//   e2m1 (NVFP4)  the bf16 pair mma_pairs.h decodes from the device layout the loader repacks the
//                 codes into (value · 2^-126), times 2^112 in bf16 (exact, normal): value · 2^-14
//   e4m3 (FP8)    on sm_89 and later one cvt.rn.f16x2.e4m3x2 a pair (exact, factor 1); before,
//                 s eeee mmm -> fp16 bits (eeee mmm) << 7, sign << 15: value · 2^-8 (subnormal
//                 codes land on fp16 subnormals with the same factor)
// then to fp32 (exact). A group's partial dot product is multiplied once by its scale · that power
// of two (Layout::kUnscale); NVFP4's per-tensor global scale goes into the same factor. Either FP8
// path gives the same bits: a power of two moves through the products and sums exactly.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_pairs.h"

namespace tessera::ops::cuda::quant {

// The hardware's e4m3 -> f16x2 conversion (sm_89+): ~2x fewer instructions a weight than the bit
// placement below it, in the matrix-vector kernels' decode-bound inner loop. Decided per compiled
// architecture (device code only reads it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define TESSERA_FP8_HW_CVT 1
#else
#define TESSERA_FP8_HW_CVT 0
#endif

// Values one lane's 16-byte load holds, and the scale groups among them.
template <QuantFormat F>
struct Layout;
template <>
struct Layout<QuantFormat::kNvfp4> {
  static constexpr int kVals = 32;             // 16 bytes of two codes each
  static constexpr int kGroups = 2;            // one e4m3 scale per 16 values
  static constexpr float kUnscale = 16384.0f;  // 2^14
};
template <>
struct Layout<QuantFormat::kFp8Block> {
  static constexpr int kVals = 16;
  static constexpr int kGroups = 1;  // block_cols is a multiple of 16: one fp32 scale
  static constexpr float kUnscale = TESSERA_FP8_HW_CVT ? 1.0f : 256.0f;  // 2^8 with the bit placement
};

// An e4m3 byte as fp32 (exact; the scales of NVFP4 groups).
__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  const uint32_t h = ((b & 0x7fu) << 7) | ((b & 0x80u) << 8);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h))) * 256.0f;
}

// Values [2i, 2i + 1] of a device-layout NVFP4 word (8 codes, mma_pairs.h) · 2^-14.
__device__ __forceinline__ float2 nvfp4_pair(uint32_t w, int i) {
  const uint32_t bits = mma_pairs::nvfp4_pair_bits(w, i);
  const __nv_bfloat162 v =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits), __floats2bfloat162_rn(0x1p112f, 0x1p112f));
  return __bfloat1622float2(v);
}

// Values [2i, 2i + 1] of an FP8 word (4 bytes, first value in the low byte) / Layout::kUnscale.
__device__ __forceinline__ float2 fp8_pair(uint32_t w, int i) {
  const uint32_t b = w >> (16 * i);
#if TESSERA_FP8_HW_CVT
  // The low byte becomes the low half (.x): the first value.
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<unsigned short>(b & 0xffffu)));
#else
  const uint32_t h = ((b & 0x7fu) << 7) | ((b & 0x80u) << 8) | ((b & 0x7f00u) << 15) | ((b & 0x8000u) << 16);
#endif
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// The kVals values of a lane's 16 bytes, scaled down (Layout::kUnscale).
template <QuantFormat F>
__device__ __forceinline__ void decode(const uint4& raw, float (&v)[Layout<F>::kVals]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (F == QuantFormat::kNvfp4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 p = nvfp4_pair(w[q], i);
        v[8 * q + 2 * i] = p.x;
        v[8 * q + 2 * i + 1] = p.y;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 p = fp8_pair(w[q], i);
        v[4 * q + 2 * i] = p.x;
        v[4 * q + 2 * i + 1] = p.y;
      }
    }
  }
}

// One weight row as a kernel streams it: its codes, its scales (NVFP4: the row's e4m3 bytes; FP8:
// the fp32 scales of its block row) and the factor every group's partial sum gets on top of its
// scale (global scale · kUnscale).
struct RowRef {
  const uint8_t* data;
  const void* scale;
  float factor;
};
template <QuantFormat F>
__device__ __forceinline__ RowRef row_ref(const QuantMatrix& m, int64_t row) {
  if constexpr (F == QuantFormat::kNvfp4)
    return {m.data + row * (m.k / 2), static_cast<const uint8_t*>(m.scale) + row * m.scale_cols,
            m.global_scale * Layout<F>::kUnscale};
  else
    return {m.data + row * m.k, static_cast<const float*>(m.scale) + (row / m.block_rows) * m.scale_cols,
            Layout<F>::kUnscale};
}

// The raw scales of values [k, k + kVals) of a row (NVFP4: two e4m3 bytes; FP8: an fp32's bits),
// loaded with the weights so that their latency overlaps the weights'.
template <QuantFormat F>
__device__ __forceinline__ uint32_t load_scales(const RowRef& r, int k, int block_cols) {
  if constexpr (F == QuantFormat::kNvfp4) {
    (void)block_cols;
    return __ldg(reinterpret_cast<const unsigned short*>(static_cast<const uint8_t*>(r.scale) + k / 16));  // even
  } else {
    return __float_as_uint(__ldg(static_cast<const float*>(r.scale) + k / block_cols));
  }
}

// The factors of the kGroups scale groups of load_scales' value.
template <QuantFormat F>
__device__ __forceinline__ void group_factors(const RowRef& r, uint32_t raw, float (&f)[Layout<F>::kGroups]) {
  if constexpr (F == QuantFormat::kNvfp4) {
    f[0] = e4m3_to_f32(raw & 0xffu) * r.factor;
    f[1] = e4m3_to_f32(raw >> 8) * r.factor;
  } else {
    f[0] = __uint_as_float(raw) * r.factor;
  }
}

// Byte offset of value k within a row.
template <QuantFormat F>
__device__ __forceinline__ int row_byte(int k) {
  return F == QuantFormat::kNvfp4 ? k / 2 : k;
}

// The same row from value k0 on (k0 a multiple of the scale groups: 16 NVFP4, block_cols FP8).
template <QuantFormat F>
__device__ __forceinline__ RowRef advance(RowRef r, int k0, int block_cols) {
  r.data += row_byte<F>(k0);
  if constexpr (F == QuantFormat::kNvfp4)
    r.scale = static_cast<const uint8_t*>(r.scale) + k0 / 16;
  else
    r.scale = static_cast<const float*>(r.scale) + k0 / block_cols;
  return r;
}

}  // namespace tessera::ops::cuda::quant
