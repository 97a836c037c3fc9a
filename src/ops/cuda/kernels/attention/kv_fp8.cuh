// Device codecs of the fp8 e4m3 KV cache (ops::KvLayerView): q = sat_e4m3_rne(x / scale) on write,
// q · scale on read. Every e4m3 value is exact in fp16, fp32 and bf16 (4 significant bits, exponents
// 2^-9 .. 2^8), so the conversions below round nothing; only the write rounds.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace tessera::ops::cuda::kvfp8 {

// sat_e4m3_rne(x / scale): IEEE division (not the approximate one), then the hardware conversion on
// SM89+ and CUDA's exact emulation below that; both saturate to ±448 and give core::f32_to_fp8_e4m3's
// bytes.
__device__ inline uint8_t encode(float x, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// Two e4m3 bytes (low byte = first element) -> two floats, exactly.
__device__ inline float2 decode2(uint16_t v) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3));
  return __half22float2(h);
}

// Two e4m3 bytes -> a bf16 pair, exactly (no scale: callers fold it in elsewhere).
__device__ inline __nv_bfloat162 decode2_bf16(uint16_t v) {
  const float2 f = decode2(v);
  return __floats2bfloat162_rn(f.x, f.y);
}

// 16 e4m3 bytes -> 16 bf16 (two 16-byte vectors), exactly.
__device__ inline void decode16_bf16(const uint4& in, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 a = decode2_bf16(static_cast<uint16_t>(w[i] & 0xffffu));
    const __nv_bfloat162 b = decode2_bf16(static_cast<uint16_t>(w[i] >> 16));
    out[2 * i] = *reinterpret_cast<const uint32_t*>(&a);
    out[2 * i + 1] = *reinterpret_cast<const uint32_t*>(&b);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

}  // namespace tessera::ops::cuda::kvfp8
