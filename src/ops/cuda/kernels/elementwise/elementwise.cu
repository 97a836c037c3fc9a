// Elementwise and row kernels of the CUDA backend.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "ops/cuda/kernels/common/block_reduce.cuh"
#include "ops/cuda/kernels/common/float4_access.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Row kernels run one block of kRowThreads per row, each thread handling up to kPerThread
// elements whose loads are all issued before any is used: at decode a step has a handful of rows,
// and a loop of dependent load-use iterations would cost a memory latency per element (~17 us for a
// 7168-wide RMSNorm instead of ~3).
constexpr int kRowThreads = 1024;
constexpr int kPerThread = 8;

__global__ void __launch_bounds__(kRowThreads)
    embedding_kernel(const __nv_bfloat16* table, const int32_t* ids, int64_t hidden, float* out) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = table + static_cast<int64_t>(ids[t]) * hidden;
  for (int64_t base = 0; base < hidden; base += static_cast<int64_t>(kRowThreads) * kPerThread) {
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = base + threadIdx.x + j * kRowThreads;
      v[j] = i < hidden ? __bfloat162float(row[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = base + threadIdx.x + j * kRowThreads;
      if (i < hidden) out[t * hidden + i] = v[j];
    }
  }
}

// out = norm(x) over columns [col_begin, col_begin + d); with `add`, x += add first (written back),
// the residual add fused with the norm after it.
__global__ void __launch_bounds__(kRowThreads)
    rms_norm_kernel(float* x, const float* add, int64_t width, int64_t col_begin, const float* weight, int64_t d,
                    float eps, float* out, int64_t out_width) {
  pdl_wait();  // first: launched with launch_dependent
  const int64_t r = blockIdx.x;
  float* xr = x + r * width + col_begin;
  const float* ar = add ? add + r * width + col_begin : nullptr;
  float* yr = out_width == d ? out + r * d : out + r * out_width + col_begin;
  if (d <= static_cast<int64_t>(kRowThreads) * kPerThread) {
    // The row and its weights stay in registers between the two passes. The weights are loaded
    // with the row: loaded between the output stores (which might alias them, for all the compiler
    // knows), each waited for the previous store's value, a memory latency per element.
    float v[kPerThread], w[kPerThread], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = threadIdx.x + j * static_cast<int64_t>(blockDim.x);
      v[j] = i < d ? xr[i] + (ar ? ar[i] : 0.0f) : 0.0f;
      w[j] = i < d ? weight[i] : 0.0f;
    }
    if (ar) {
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int64_t i = threadIdx.x + j * static_cast<int64_t>(blockDim.x);
        if (i < d) xr[i] = v[j];
      }
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) ss += v[j] * v[j];
    const float inv = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = threadIdx.x + j * static_cast<int64_t>(blockDim.x);
      if (i < d) yr[i] = v[j] * inv * w[j];
    }
    return;
  }
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = ar ? (xr[i] = xr[i] + ar[i]) : xr[i];
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * inv * weight[i];
}

// A value stored as float, or rounded to nearest bf16 (the rounding launch_f32_to_bf16 does, so a
// kernel writing bf16 gives the bits that writing fp32 and converting gave).
__device__ inline void store_as(float* p, float v) { *p = v; }
__device__ inline void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// Four consecutive values the same way (16 bytes of float, or 8 of bf16: p aligned to that).
__device__ inline void store4_as(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ inline void store4_as(__nv_bfloat16* p, float4 v) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(p) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}

// The elementwise kernels below take kVec consecutive elements a thread: 4 where the launch found n
// a multiple of 4 and every pointer 16-byte aligned (elementwise_vec), with 16-byte fp32 loads;
// else 1. With one float a thread, the 24 conversions of an 8192-token prefill of four layers took
// 168 µs each on average on an H100 (99 with four). The same values either way.
template <int kVec>
__device__ inline void load_vec(const float* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    v[0] = *p;
  }
}
template <int kVec, class Out>
__device__ inline void store_vec(Out* p, const float (&v)[kVec]) {
  if constexpr (kVec == 4)
    store4_as(p, make_float4(v[0], v[1], v[2], v[3]));
  else
    store_as(p, v[0]);
}
__device__ inline int64_t vec_index(int vec) {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * vec;
}

template <int kVec>
__global__ void add_kernel(float* x, const float* y, int64_t n) {
  pdl_wait();  // first: launched with launch_dependent
  const int64_t i = vec_index(kVec);
  if (i >= n) return;
  float a[kVec], b[kVec];
  load_vec(x + i, a);
  load_vec(y + i, b);
#pragma unroll
  for (int j = 0; j < kVec; ++j) a[j] += b[j];
  store_vec(x + i, a);
}

template <int kVec, class Out>
__global__ void silu_mul_kernel(const float* g, const float* u, Out* out, int64_t n) {
  const int64_t i = vec_index(kVec);
  if (i >= n) return;
  float a[kVec], b[kVec];
  load_vec(g + i, a);
  load_vec(u + i, b);
#pragma unroll
  for (int j = 0; j < kVec; ++j) a[j] = a[j] / (1.0f + __expf(-a[j])) * b[j];
  store_vec(out + i, a);
}

__global__ void rope_kernel(float* x, int64_t width, const float* cos, const float* sin, int64_t half,
                            int64_t col_begin, int64_t col_stride, int64_t count) {
  pdl_wait();  // first: launched with launch_dependent
  const int64_t r = blockIdx.x;
  for (int64_t j = threadIdx.x; j < count * half; j += blockDim.x) {
    const int64_t v = j / half, i = j % half;
    float* p = x + r * width + col_begin + v * col_stride;
    const float c = cos[r * half + i], s = sin[r * half + i];
    const float a = p[2 * i], b = p[2 * i + 1];
    p[2 * i] = a * c - b * s;
    p[2 * i + 1] = a * s + b * c;
  }
}

template <int kVec>
__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  const int64_t i = vec_index(kVec);
  if (i >= n) return;
  float v[kVec];
  load_vec(in + i, v);
  store_vec(out + i, v);
}

// x = hi + lo with both bf16: hi carries 8 significant bits, lo the next 8 (|x - hi - lo| ~ 2^-17 |x|).
template <int kVec>
__global__ void f32_to_bf16_split_kernel(const float* in, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t n) {
  const int64_t i = vec_index(kVec);
  if (i >= n) return;
  float v[kVec], h[kVec], l[kVec];
  load_vec(in + i, v);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    h[j] = __bfloat162float(__float2bfloat16_rn(v[j]));
    l[j] = v[j] - h[j];
  }
  store_vec(hi + i, h);  // h is a bf16 value: stored exactly
  store_vec(lo + i, l);
}

// out[i] = x[rows[i] / per] (per 1: plain row indices; a token's slots: pair ids). VEC: 16-byte
// loads (width a multiple of 4, rows 16-byte aligned: float4_access), whose loads a thread
// issues ahead of its stores; otherwise one value at a time. The same values either way.
template <class Index, class Out, bool VEC>
__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t width, const Index* __restrict__ rows, int per,
                                   Out* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i] / per) * width;
  Out* dst = out + i * width;
  if constexpr (VEC) {
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < width / 4; j += blockDim.x)
      store4_as(dst + 4 * j, reinterpret_cast<const float4*>(src)[j]);
  } else {
#pragma unroll 8
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) store_as(dst + j, src[j]);
  }
}

// Elements a thread of the elementwise kernels: 4 where float4_access allows, else 1.
int elementwise_vec(int64_t n, std::initializer_list<const void*> ptrs) { return float4_access(n, ptrs) ? 4 : 1; }

template <class Index, class Out>
void launch_gather(const float* x, int64_t width, const Index* rows, int per, int64_t n, Out* out, int threads,
                   cudaStream_t s) {
  if (n <= 0) return;
  if (float4_access(width, {x, out}))
    launch_plain(gather_rows_kernel<Index, Out, true>, static_cast<unsigned>(n), threads, 0, s, x, width, rows, per,
                 out);
  else
    launch_plain(gather_rows_kernel<Index, Out, false>, static_cast<unsigned>(n), threads, 0, s, x, width, rows, per,
                 out);
}

// Deterministic pseudo-random values in [-scale, scale) from a hash of the index (benchmark data).
// A splitmix64 hash of element i under `seed` (synthetic weights: deterministic, any grid).
__device__ inline uint64_t hash_element(int64_t i, uint64_t seed) {
  uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_random_bf16_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t z = hash_element(i, seed);
    const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
    p[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}

__global__ void fill_random_bytes_kernel(uint8_t* p, int64_t n, uint64_t seed, uint8_t and_mask, uint8_t or_mask) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<uint8_t>((static_cast<uint8_t>(hash_element(i, seed) >> 40) & and_mask) | or_mask);
  }
}

// Reads n 16-byte words, 8 in flight a thread, and folds them into one word a thread that is stored
// only if it matches an impossible pattern (so the loads are not optimised away): the read ceiling.
__global__ void read_stream_kernel(const uint4* __restrict__ p, int64_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i + u * stride < n ? __ldcs(p + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      acc.x ^= v[u].x;
      acc.y ^= v[u].y;
      acc.z ^= v[u].z;
      acc.w ^= v[u].w;
    }
  }
  if (acc.x == 0x9E3779B9u && acc.y == 0x7F4A7C15u && acc.z == acc.w) *sink = acc;
}

}  // namespace

void launch_read_stream(const void* p, size_t bytes, void* sink, int num_sms, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(uint4));
  if (n > 0)
    launch_plain(read_stream_kernel, static_cast<unsigned>(num_sms * 8), kThreads, 0, s, static_cast<const uint4*>(p),
                 n, static_cast<uint4*>(sink));
}

void launch_fill_random_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  if (n > 0) launch_plain(fill_random_bf16_kernel, 1024, kThreads, 0, s, p, n, seed, scale);
}

void launch_fill_random_bytes(uint8_t* p, int64_t n, uint64_t seed, uint8_t and_mask, uint8_t or_mask, cudaStream_t s) {
  if (n > 0) launch_plain(fill_random_bytes_kernel, 1024, kThreads, 0, s, p, n, seed, and_mask, or_mask);
}

void launch_embedding(const __nv_bfloat16* table, const int32_t* ids, int64_t tokens, int64_t hidden, float* out,
                      cudaStream_t s) {
  if (tokens > 0)
    launch_plain(embedding_kernel, static_cast<unsigned>(tokens), kRowThreads, 0, s, table, ids, hidden, out);
}

void launch_rms_norm(const float* x, int64_t rows, int64_t width, int64_t col_begin, const float* weight, int64_t d,
                     float eps, float* out, int64_t out_width, cudaStream_t s) {
  // Without `add` the kernel only reads x.
  if (rows > 0)
    launch_dependent(rms_norm_kernel, dim3(static_cast<unsigned>(rows)), kRowThreads, 0, s, const_cast<float*>(x),
                     static_cast<const float*>(nullptr), width, col_begin, weight, d, eps, out, out_width);
}

void launch_add_rms_norm(float* x, const float* add, int64_t rows, int64_t width, const float* weight, float eps,
                         float* out, cudaStream_t s) {
  if (rows > 0)
    launch_dependent(rms_norm_kernel, dim3(static_cast<unsigned>(rows)), kRowThreads, 0, s, x, add, width, int64_t{0},
                     weight, width, eps, out, width);
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int vec = elementwise_vec(n, {x, y});
  const auto kernel = vec == 4 ? add_kernel<4> : add_kernel<1>;
  launch_dependent(kernel, blocks_for(n / vec), kThreads, 0, s, x, y, n);
}

void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int vec = elementwise_vec(n, {gate, up, out});
  launch_plain(vec == 4 ? silu_mul_kernel<4, float> : silu_mul_kernel<1, float>, blocks_for(n / vec), kThreads, 0, s,
               gate, up, out, n);
}

void launch_silu_mul_bf16(const float* gate, const float* up, __nv_bfloat16* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int vec = elementwise_vec(n, {gate, up, out});
  launch_plain(vec == 4 ? silu_mul_kernel<4, __nv_bfloat16> : silu_mul_kernel<1, __nv_bfloat16>, blocks_for(n / vec),
               kThreads, 0, s, gate, up, out, n);
}

void launch_rope(float* x, int64_t rows, int64_t width, const float* cos, const float* sin, int64_t half,
                 int64_t col_begin, int64_t col_stride, int64_t count, cudaStream_t s) {
  // A thread per rotated pair, up to 1024 a row: each iteration of a thread's loop waits for its
  // loads (the store may alias the next pair's), so 128 threads looping over a decode token's 64
  // heads x 32 pairs took 6.4 us.
  const int64_t pairs = count * half;
  const unsigned threads = static_cast<unsigned>(std::clamp<int64_t>((pairs + 31) / 32 * 32, 32, 1024));
  if (rows > 0)
    launch_dependent(rope_kernel, dim3(static_cast<unsigned>(rows)), threads, 0, s, x, width, cos, sin, half, col_begin,
                     col_stride, count);
}

void launch_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int vec = elementwise_vec(n, {in, out});
  launch_plain(vec == 4 ? f32_to_bf16_kernel<4> : f32_to_bf16_kernel<1>, blocks_for(n / vec), kThreads, 0, s, in, out,
               n);
}

void launch_f32_to_bf16_split(const float* in, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int vec = elementwise_vec(n, {in, hi, lo});
  launch_plain(vec == 4 ? f32_to_bf16_split_kernel<4> : f32_to_bf16_split_kernel<1>, blocks_for(n / vec), kThreads, 0,
               s, in, hi, lo, n);
}

void launch_gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t n, float* out, cudaStream_t s) {
  launch_gather(x, width, rows, 1, n, out, kRowThreads, s);
}

void launch_gather_pair_rows(const float* x, int64_t width, const int32_t* pairs, int per_token, int64_t n, float* out,
                             cudaStream_t s) {
  launch_gather(x, width, pairs, per_token, n, out, kThreads, s);
}

void launch_gather_pair_rows_bf16(const float* x, int64_t width, const int32_t* pairs, int per_token, int64_t n,
                                  __nv_bfloat16* out, cudaStream_t s) {
  launch_gather(x, width, pairs, per_token, n, out, kThreads, s);
}

}  // namespace tessera::ops::cuda
