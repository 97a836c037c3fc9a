#include "core/dtype.h"

#include <array>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tessera::core {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kU16, "U16", 2},        {DType::kI16, "I16", 2},        {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},        {DType::kU64, "U64", 8},        {DType::kI64, "I64", 8},
    {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},      {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},        {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
};
const DTypeInfo& info(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i;
  fail("internal error: unknown dtype enum {}", static_cast<int>(t));
}
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_safetensors_dtype(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.name == s) return i.type;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

namespace {
float fp8_e4m3_decode(uint8_t b) {
  uint32_t sign = b >> 7, exp = (b >> 3) & 0xfu, mant = b & 7u;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                     : std::ldexp(static_cast<float>(mant | 8u), static_cast<int>(exp) - 10);
  return sign ? -v : v;
}
}  // namespace

// Table lookup: this sits in the innermost loop of FP8 weight dequantization.
float fp8_e4m3_to_f32(uint8_t b) {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = fp8_e4m3_decode(static_cast<uint8_t>(i));
    return t;
  }();
  return table[b];
}

uint8_t f32_to_fp8_e4m3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;           // NaN
  if (abs >= 0x43e80000u) return sign | 0x7eu;  // >= 464 = 448 + half an ulp (ties to 448): saturate
  if (abs < 0x3c800000u) {                      // below 2^-6, the smallest normal: multiples of 2^-9
    float a;
    std::memcpy(&a, &abs, 4);
    // a * 512 is exact (a power-of-two scaling of a number below 8); rounding it to an integer
    // in the default mode is round-to-nearest-even. 8 becomes 0x08, the smallest normal: right.
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f)));
  }
  // Normal: keep 3 of the 23 mantissa bits, round to nearest even at bit 20 (a carry moves into
  // the exponent, which is what rounding up across a power of two means).
  const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t exp = (r >> 23) - 127 + 7, mant = (r >> 20) & 7u;
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

float fp8_e5m2_to_f32(uint8_t b) { return f16_to_f32(static_cast<uint16_t>(b) << 8); }

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  auto load = [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      dst[i] = static_cast<float>(v);
    }
  };
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = f16_to_f32(v);
      }
      return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(p[i]);
      return;
    case DType::kF8E5M2:
      for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_f32(p[i]);
      return;
    case DType::kF64:
      load(double{});
      return;
    case DType::kBool:
    case DType::kU8:
      load(uint8_t{});
      return;
    case DType::kI8:
      load(int8_t{});
      return;
    case DType::kU16:
      load(uint16_t{});
      return;
    case DType::kI16:
      load(int16_t{});
      return;
    case DType::kU32:
      load(uint32_t{});
      return;
    case DType::kI32:
      load(int32_t{});
      return;
    case DType::kU64:
      load(uint64_t{});
      return;
    case DType::kI64:
      load(int64_t{});
      return;
    case DType::kF8E8M0:
      for (size_t i = 0; i < n; ++i)
        dst[i] =
            p[i] == 0xff ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, static_cast<int>(p[i]) - 127);
      return;
  }
  fail("convert_to_f32: unsupported dtype {}", dtype_name(t));
}

std::string kv_cache_dtype_name(KvCacheDtype t) {
  switch (t) {
    case KvCacheDtype::kF32:
      return "fp32";
    case KvCacheDtype::kBF16:
      return "bf16";
    case KvCacheDtype::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "?";
}

std::optional<KvCacheDtype> parse_kv_cache_dtype(const std::string& s, const std::string& flag) {
  if (s == "auto") return std::nullopt;
  if (s == "fp32" || s == "f32" || s == "float32" || s == "float") return KvCacheDtype::kF32;
  if (s == "bf16" || s == "bfloat16") return KvCacheDtype::kBF16;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDtype::kFp8E4M3;
  fail("{} '{}': expected auto, fp32, bf16 or fp8", flag, s);
}

}  // namespace tessera::core
