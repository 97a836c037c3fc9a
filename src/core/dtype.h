// Element types and the scalar codecs the weight formats need (bf16, fp16, fp8 e4m3, e2m1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::core {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
};

// Size of one element in bytes.
size_t dtype_size(DType t);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; nullopt for an unknown or unsupported one.
std::optional<DType> parse_safetensors_dtype(std::string_view s);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t v);
// float8 e4m3fn: bias 7, no infinities, 0x7f / 0xff are NaN, max 448.
float fp8_e4m3_to_f32(uint8_t v);
// f32 -> float8 e4m3fn, round to nearest even, saturating: |x| beyond 448 (infinities included)
// becomes ±448, never NaN; a NaN input becomes the canonical NaN 0x7f. Underflow keeps the sign
// (±0). For every number, bit for bit what CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// __NV_E4M3) returns (its exact emulation below SM89, the cvt instruction above), so a cache written
// on either backend holds the same bytes; NaN inputs are not part of that promise.
uint8_t f32_to_fp8_e4m3(float f);
// float8 e5m2: bias 15, IEEE-like with infinities.
float fp8_e5m2_to_f32(uint8_t v);
// e2m1 (NVFP4 element): bit 3 sign, bits 2..0 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
inline float e2m1_to_f32(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = kMagnitude[code & 7];
  return (code & 8) ? -m : m;
}

// Converts `n` elements of type `t` at `src` to fp32. Supports the float and integer types above.
void convert_to_f32(DType t, const void* src, float* dst, size_t n);

// KV-cache element types a backend can store (an fp8 cache is U8 bytes with a per-layer scale).
enum class KvCacheDtype { kF32, kBF16, kFp8E4M3 };
std::string kv_cache_dtype_name(KvCacheDtype t);
// Parses a user spelling: "auto" gives nullopt; f32/float32/fp32, bf16/bfloat16, fp8/fp8_e4m3.
// Throws naming `flag` for anything else.
std::optional<KvCacheDtype> parse_kv_cache_dtype(const std::string& s, const std::string& flag);

}  // namespace tessera::core
