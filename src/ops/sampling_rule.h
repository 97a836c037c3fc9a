// The arithmetic of Ops::sample (see ops.h for the semantics), shared word for word by the CPU
// reference and the CUDA kernel so that both pick the same token for the same inputs, bit for bit.
//
// Why integers: the kept set (top-k, then top-p) and the draw are decided on token masses that are
// fixed-point integers, q = round(exp(s - s_max) · 2^40). Integer sums do not depend on the order
// of summation, so a GPU reduction and a CPU loop give the same totals; and exp is computed here
// from plain fp32 operations (+, -, ·, round-to-nearest, no fused multiply-add) instead of each
// platform's own expf, so the masses themselves are identical. Host code that includes this file
// must be compiled with -ffp-contract=off (see src/ops/CMakeLists.txt); device code uses the
// explicitly rounded intrinsics, which are never fused.
//
// Plain C++17 with no tessera includes: it is compiled by nvcc as well.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// Internal linkage: each translation unit keeps its own copy, compiled with its own flags, so the
// linker never swaps in one compiled elsewhere (with contraction on).
#if defined(__CUDACC__)
#define TESSERA_HD static __host__ __device__ __forceinline__
#else
#define TESSERA_HD static inline
#endif

namespace tessera::ops {

// One row of Ops::sample. Plain data: uploaded to the GPU as bytes.
struct SampleRow {
  float temperature = 1.0f;  // 0: greedy (first argmax); otherwise > 0 with 1/temperature finite
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // in (0, 1]; 1: off
  double uniform = 0.0;      // in [0, 1): the caller's draw (ignored when greedy); double so that an
                             // engine RNG's 53-bit uniform is used as drawn
};

namespace sampling {

// Masses are multiples of 2^-40 of the largest token's weight; the largest token weighs kMassOne.
// With at most kMaxVocab tokens a row's total stays below 2^63.
constexpr uint64_t kMassOne = uint64_t{1} << 40;
constexpr int64_t kMaxVocab = int64_t{1} << 23;
constexpr double kLn2x40 = 27.725887222397812;  // 40 · ln 2, to turn a mass total back into a log

TESSERA_HD float f_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TESSERA_HD float f_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TESSERA_HD float f_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TESSERA_HD float f_rint(float a) {  // to nearest, ties to even
#ifdef __CUDA_ARCH__
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}
TESSERA_HD float f_recip(float a) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(a);
#else
  return 1.0f / a;
#endif
}
TESSERA_HD uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
TESSERA_HD float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
TESSERA_HD double u64_to_double(uint64_t v) {
#ifdef __CUDA_ARCH__
  return __ull2double_rn(v);
#else
  return static_cast<double>(v);
#endif
}

// The value a logit is ranked and weighed by: logit · (1 / temperature) in fp32 (1 for greedy).
// NaN ranks as -inf; -0 and +0 are one value, so that ties are ties.
TESSERA_HD float scaled_logit(float x, float inv_t) {
  const float s = f_mul(x, inv_t);
  if (s != s) return -INFINITY;
  return s == 0.0f ? 0.0f : s;
}

// An order-preserving map of (non-NaN) floats to unsigned integers: a < b <=> key(a) < key(b).
// key(-inf) = 0x007FFFFF, so key 0 is below every value.
TESSERA_HD uint32_t order_key(float s) {
  const uint32_t b = float_bits(s);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
TESSERA_HD float key_value(uint32_t k) { return bits_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k); }

// round(exp(d) · 2^40) for d <= 0: Cody-Waite reduction d = n·ln2 + r, |r| <= ln2/2, then the
// degree-7 Taylor polynomial of exp(r) (relative error ~1e-7, far below what matters for sampling).
// Below d = -30 the result would round to 0 anyway; NaN gives 0 too.
TESSERA_HD uint64_t exp_mass(float d) {
  if (!(d > -30.0f)) return 0;
  const float n = f_rint(f_mul(d, 1.44269504f));  // in [-43, 0]
  const float r = f_sub(f_sub(d, f_mul(n, 0.693145751953125f)), f_mul(n, 1.42860682e-6f));
  float p = 1.98412698e-4f;  // 1/7!
  p = f_add(f_mul(p, r), 1.38888889e-3f);
  p = f_add(f_mul(p, r), 8.33333333e-3f);
  p = f_add(f_mul(p, r), 4.16666667e-2f);
  p = f_add(f_mul(p, r), 1.66666667e-1f);
  p = f_add(f_mul(p, r), 0.5f);
  p = f_add(f_mul(p, r), 1.0f);
  p = f_add(f_mul(p, r), 1.0f);
  // · 2^(n + 40), an exact power-of-two scaling; n + 40 is in [-3, 40].
  const float v = f_mul(p, bits_float(static_cast<uint32_t>(static_cast<int>(n) + 40 + 127) << 23));
#ifdef __CUDA_ARCH__
  return __float2ull_rn(v);
#else
  return static_cast<uint64_t>(std::nearbyint(v));
#endif
}

// The mass of a token with scaled logit s in a row whose largest is s_max (> -inf). The largest
// tokens weigh exactly kMassOne, also when s_max is +inf (then every finite token weighs 0).
TESSERA_HD uint64_t token_mass(float s, float s_max) { return s == s_max ? kMassOne : exp_mass(f_sub(s, s_max)); }

// s - s_max as the log of a token's unnormalised weight (0 for the largest), for logprobs.
TESSERA_HD float log_weight(float s, float s_max) { return s == s_max ? 0.0f : f_sub(s, s_max); }

// top-p keeps the shortest prefix (most probable first) whose mass P has reaches_top_p(P, t) with
// t = top_p_threshold(top_p, mass of the top-k set): P >= top_p · S, evaluated in double.
TESSERA_HD double top_p_threshold(float top_p, uint64_t top_k_mass) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(static_cast<double>(top_p), u64_to_double(top_k_mass));
#else
  return static_cast<double>(top_p) * u64_to_double(top_k_mass);
#endif
}
TESSERA_HD bool reaches_top_p(uint64_t prefix_mass, double threshold) {
  return u64_to_double(prefix_mass) >= threshold;
}

// The draw: the kept token (in id order) whose cumulative mass C first exceeds
// floor(uniform · kept_mass). Always below kept_mass for uniform < 1, so some token is found.
TESSERA_HD uint64_t draw_target(double uniform, uint64_t kept_mass) {
#ifdef __CUDA_ARCH__
  return __double2ull_rz(__dmul_rn(uniform, u64_to_double(kept_mass)));
#else
  return static_cast<uint64_t>(uniform * u64_to_double(kept_mass));
#endif
}

// log p of a kept token: its log weight minus the log of the kept mass (in units of 2^-40).
TESSERA_HD float kept_logprob(float log_w, uint64_t kept_mass) {
#ifdef __CUDA_ARCH__
  const double log_mass = ::log(u64_to_double(kept_mass));
#else
  const double log_mass = std::log(u64_to_double(kept_mass));
#endif
  return static_cast<float>(static_cast<double>(log_w) - (log_mass - kLn2x40));
}

}  // namespace sampling
}  // namespace tessera::ops
