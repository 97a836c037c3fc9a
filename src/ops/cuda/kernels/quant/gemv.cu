// Matrix-vector kernels over weights in their checkpoint format (W8A16 FP8 block, W4A16 NVFP4):
// decode steps read each weight byte once, at 1 byte (FP8) or 4.5 bits (NVFP4) a value instead of
// the 2 bytes of bf16. Products are accumulated in fp32 (quant_matrix.cuh says how the codes become
// floats). A warp owns kStreams weight rows; every lane loads 16 bytes of each per K chunk, kUnroll
// chunks ahead (256 bytes a lane in flight), decodes one 32-bit word of every row at a time and
// applies it to each token's activations, so activations are read once per word for all rows.
//   dense:   out[t, n] = x[t] · W[n]                        (x fp32; Ops::linear at decode)
//   gate/up: act[m, n] = silu(x[tok(m)] · Wg[e][n]) · (x[tok(m)] · Wu[e][n])  (pairs m of expert e
//            as grouped.cu's prepare kernel sorted them)
//   down:    y[pair(m), n] = act[m] · Wd[e][n]
// Activations stay fp32 (x and act): at decode they are a few KB beside MBs of weights, and the
// bf16 rounding the bf16 kernels' MMAs need would be the largest error of the step.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/kernels/common/stream_load.cuh"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/quant_matrix.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

using quant::Layout;

constexpr int kWarps = 8;
constexpr int kStreams = 4;  // weight rows a warp reads side by side
// 16-byte loads of each row in flight per lane: 128 bytes a lane, with two blocks resident per SM
// (__launch_bounds__ below: at one block of 8 warps an SM, 240 registers a thread, the decode
// between loads was not hidden; unrolling 4 spilled under the 128-register bound).
template <QuantFormat F>
constexpr int kUnroll = 2;
constexpr int kMinBlocks = 2;
constexpr int kMoeMaxNt = 4;

enum class Mode { kDense, kGateUp, kDown };

// Values one 32-bit word holds.
template <QuantFormat F>
constexpr int kWordVals = F == QuantFormat::kNvfp4 ? 8 : 4;

template <QuantFormat F>
__device__ __forceinline__ void decode_word(uint32_t w, float (&v)[kWordVals<F>]) {
#pragma unroll
  for (int i = 0; i < kWordVals<F> / 2; ++i) {
    const float2 p = F == QuantFormat::kNvfp4 ? quant::nvfp4_pair(w, i) : quant::fp8_pair(w, i);
    v[2 * i] = p.x;
    v[2 * i + 1] = p.y;
  }
}

// N consecutive activations as fp32.
template <int N>
__device__ __forceinline__ void load_act(const float* p, float (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + i);
    a[i] = v.x;
    a[i + 1] = v.y;
    a[i + 2] = v.z;
    a[i + 3] = v.w;
  }
}
template <int N>
__device__ __forceinline__ void load_act(const __nv_bfloat16* p, float (&a)[N]) {
  static_assert(N == 4 || N == 8);
  uint32_t w[N / 2];
  if constexpr (N == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    a[2 * i] = f.x;
    a[2 * i + 1] = f.y;
  }
}

// No work before the activations are read.
struct NothingFirst {
  __device__ void operator()() const {}
};

// acc[s][j] += W[s][row[s]] · x[j] over the K chunks slice, slice + slices, ... of this lane.
// ntok <= NT tokens are real (x[j] for j >= ntok is not read). before_x() runs once, after the first
// chunks' weight loads are issued and before any activation is read (a kernel's pdl_wait: its first
// weights are then in flight while the kernel before it finishes); not at all when this lane has no
// chunk.
template <QuantFormat F, class Act, int NT, class BeforeX = NothingFirst>
__device__ __forceinline__ void stream_rows(const QuantMatrix* const (&W)[kStreams], const int (&row)[kStreams],
                                            const Act* const (&x)[NT], int ntok, int slice, int slices,
                                            float (&acc)[kStreams][NT], BeforeX before_x = {}) {
  constexpr int V = Layout<F>::kVals, G = Layout<F>::kGroups, WV = kWordVals<F>;
  constexpr int kWordsPerGroup = V / G / WV;
  const int lane = threadIdx.x & 31;
  const int K = W[0]->k, block_cols = W[0]->block_cols, chunk = 32 * V, chunks = (K + chunk - 1) / chunk;
  const uint64_t policy = l2_evict_first_policy();
  quant::RowRef ref[kStreams];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) ref[s] = quant::row_ref<F>(*W[s], row[s]);
  constexpr int U = kUnroll<F>;
  for (int c0 = slice; c0 < chunks; c0 += slices * U) {
    uint4 raw[kStreams][U];
    uint32_t raw_scale[kStreams][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * slices, k = c * chunk + lane * V;
      const bool in = c < chunks && k < K;
#pragma unroll
      for (int s = 0; s < kStreams; ++s) {
        raw[s][u] =
            in ? load_stream(reinterpret_cast<const __nv_bfloat16*>(ref[s].data + quant::row_byte<F>(k)), policy)
               : make_uint4(0, 0, 0, 0);
        raw_scale[s][u] = in ? quant::load_scales<F>(ref[s], k, block_cols) : 0u;
      }
    }
    if (c0 == slice) before_x();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * slices, k = c * chunk + lane * V;
      if (c >= chunks || k >= K) continue;
      float f[kStreams][G];
#pragma unroll
      for (int s = 0; s < kStreams; ++s) quant::group_factors<F>(ref[s], raw_scale[s][u], f[s]);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float part[kStreams][NT];
#pragma unroll
        for (int s = 0; s < kStreams; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j) part[s][j] = 0.0f;
#pragma unroll
        for (int qq = 0; qq < kWordsPerGroup; ++qq) {
          const int q = g * kWordsPerGroup + qq;
          float wv[kStreams][WV];
#pragma unroll
          for (int s = 0; s < kStreams; ++s) {
            const uint32_t word = q == 0 ? raw[s][u].x : q == 1 ? raw[s][u].y : q == 2 ? raw[s][u].z : raw[s][u].w;
            decode_word<F>(word, wv[s]);
          }
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if (j >= ntok) break;
            float a[WV];
            load_act<WV>(x[j] + k + q * WV, a);
#pragma unroll
            for (int s = 0; s < kStreams; ++s)
#pragma unroll
              for (int i = 0; i < WV; ++i) part[s][j] = fmaf(wv[s][i], a[i], part[s][j]);
          }
        }
#pragma unroll
        for (int s = 0; s < kStreams; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j) acc[s][j] = fmaf(part[s][j], f[s][g], acc[s][j]);
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kStreams; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[s][j] += __shfl_xor_sync(0xffffffffu, acc[s][j], off);
}

// Dense: a block is kWarps / slices groups of kStreams rows, each group's K chunks split over
// `slices` warps that meet in shared memory. kPair: rows [0, w.n) are w's, written to out, rows
// [w.n, w.n + w2.n) the second matrix's, written to out2: two projections of one input in one
// launch (w.n is a multiple of kStreams, so a group's rows are in one matrix); without it w2 and
// out2 are not read, and the single-matrix instances compile as they did before pairs (selecting
// the matrix costs registers, and stack at 2-8 tokens).
template <QuantFormat F, int NT, bool kPair>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    quant_gemv_kernel(QuantMatrix w, QuantMatrix w2, const float* __restrict__ x, int64_t x_row, int tokens,
                      float* __restrict__ out, float* __restrict__ out2, int slices) {
  __shared__ float part[kWarps][kStreams][NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / slices, slice = warp % slices, groups = kWarps / slices;
  const int n0 = (static_cast<int>(blockIdx.x) * groups + group) * kStreams;
  float acc[kStreams][NT];
#pragma unroll
  for (int s = 0; s < kStreams; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[s][j] = 0.0f;
  const int rows = kPair ? w.n + w2.n : w.n;
  if (n0 < rows) {
    // The pair's matrix by value, field by field: the pointers below then address a local the
    // compiler keeps in registers, not a parameter copied to the stack.
    const bool second = kPair && n0 >= w.n;
    const QuantMatrix m = second ? w2 : w;
    const QuantMatrix& mat = kPair ? m : w;
    const int r0 = second ? n0 - w.n : n0;
    const QuantMatrix* W[kStreams] = {&mat, &mat, &mat, &mat};
    const int row[kStreams] = {r0, r0 + 1, r0 + 2, r0 + 3};
    const float* xr[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) xr[j] = x + static_cast<int64_t>(j < tokens ? j : 0) * x_row;
    // Launched with launch_dependent: x is the previous kernel's output, the weights are constant
    // (launch.cuh), so their first loads go out before the wait.
    stream_rows<F, float, NT>(W, row, xr, tokens, slice, slices, acc, [] { pdl_wait(); });
  }
  pdl_wait();  // for warps without rows or chunks (a second wait returns at once)
  if (lane == 0)
#pragma unroll
    for (int s = 0; s < kStreams; ++s)
#pragma unroll
      for (int j = 0; j < NT; ++j) part[warp][s][j] = acc[s][j];
  __syncthreads();
  const int t = threadIdx.x;
  if (t < groups * kStreams * NT) {
    const int gi = t / (kStreams * NT), s = (t / NT) % kStreams, j = t % NT;
    const int n = (static_cast<int>(blockIdx.x) * groups + gi) * kStreams + s;
    if (n < rows && j < tokens) {
      float v = 0.0f;
      for (int z = 0; z < slices; ++z) v += part[gi * slices + z][s][j];
      if (!kPair || n < w.n)
        out[static_cast<int64_t>(j) * w.n + n] = v;
      else
        out2[static_cast<int64_t>(j) * w2.n + (n - w.n)] = v;
    }
  }
}

// The NT pairs [m0, m0 + NT) of one expert (at most `end`) through this warp's rows.
template <QuantFormat F, Mode M, int NT>
__device__ __forceinline__ void project_pairs(const QuantMatrix* const (&W)[kStreams], const int (&row)[kStreams],
                                              const float* __restrict__ a, int top_k,
                                              const int32_t* __restrict__ sorted, int m0, int end, int n0,
                                              float* __restrict__ act_out, float* __restrict__ y_out) {
  const int k_dim = W[0]->k, n_dim = W[0]->n;
  const float* x[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int m = min(m0 + j, end - 1);
    x[j] = a + static_cast<int64_t>(M == Mode::kGateUp ? sorted[m] / top_k : m) * k_dim;
  }
  float acc[kStreams][NT];
#pragma unroll
  for (int s = 0; s < kStreams; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[s][j] = 0.0f;
  stream_rows<F, float, NT>(W, row, x, min(NT, end - m0), 0, 1, acc);
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int m = m0 + j;
    if (m >= end) break;
    if constexpr (M == Mode::kGateUp) {
#pragma unroll
      for (int r = 0; r < kStreams / 2; ++r) {
        const float g = acc[2 * r][j], u = acc[2 * r + 1][j];
        act_out[static_cast<int64_t>(m) * n_dim + n0 + r] = g / (1.0f + __expf(-g)) * u;
      }
    } else {
      const int64_t pair = sorted[m];
#pragma unroll
      for (int r = 0; r < kStreams; ++r) y_out[pair * n_dim + n0 + r] = acc[r][j];
    }
  }
}

// One block per (kWarps warps of rows, active expert): gate/up warps own rows n0, n0 + 1 of both
// matrices (streams gate n0, up n0, gate n0 + 1, up n0 + 1); down warps rows n0 .. n0 + 3.
template <QuantFormat F, Mode M>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    quant_expert_kernel(const float* __restrict__ a, int top_k, const int32_t* __restrict__ sorted,
                        const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                        const int32_t* __restrict__ num_active, const QuantMatrix* __restrict__ w0,
                        const QuantMatrix* __restrict__ w1, float* __restrict__ act_out, float* __restrict__ y_out) {
  pdl_wait();  // first: launched with launch_dependent
  if (static_cast<int>(blockIdx.y) >= *num_active) return;
  constexpr int kRows = M == Mode::kGateUp ? kStreams / 2 : kStreams;
  const int e = active[blockIdx.y];
  const int n_dim = w0[e].n;
  const int n0 = (static_cast<int>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (n0 >= n_dim) return;  // n_dim % kRows == 0
  const int begin = offsets[e], end = offsets[e + 1];
  const QuantMatrix* W[kStreams];
  int row[kStreams];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) {
    W[s] = M == Mode::kGateUp && (s & 1) ? &w1[e] : &w0[e];
    row[s] = n0 + (M == Mode::kGateUp ? s >> 1 : s);
  }
  for (int m0 = begin; m0 < end; m0 += kMoeMaxNt) {
    const int left = end - m0;
    if (left == 1)
      project_pairs<F, M, 1>(W, row, a, top_k, sorted, m0, end, n0, act_out, y_out);
    else if (left == 2)
      project_pairs<F, M, 2>(W, row, a, top_k, sorted, m0, end, n0, act_out, y_out);
    else
      project_pairs<F, M, 4>(W, row, a, top_k, sorted, m0, end, n0, act_out, y_out);
  }
}

// out [n, k] bf16: a thread per 8 consecutive values of a row.
template <QuantFormat F>
__global__ void dequant_kernel(QuantMatrix w, __nv_bfloat16* __restrict__ out) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= static_cast<int64_t>(w.n) * w.k) return;
  const int64_t row = i / w.k, k = i % w.k;
  float scale;
  if constexpr (F == QuantFormat::kNvfp4) {
    const uint8_t sb = static_cast<const uint8_t*>(w.scale)[row * w.scale_cols + k / 16];
    // Block scale x global scale in fp32, as ModelOpt (and the CPU reference) multiply them.
    scale = quant::e4m3_to_f32(sb) * w.global_scale;
  } else {
    scale = static_cast<const float*>(w.scale)[(row / w.block_rows) * w.scale_cols + k / w.block_cols];
  }
  float v[8];
  if constexpr (F == QuantFormat::kNvfp4) {
    const uint32_t word = *reinterpret_cast<const uint32_t*>(w.data + (row * w.k + k) / 2);
    decode_word<F>(word, v);
  } else {
    const uint2 two = *reinterpret_cast<const uint2*>(w.data + row * w.k + k);
    float lo[4], hi[4];
    decode_word<F>(two.x, lo);
    decode_word<F>(two.y, hi);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = lo[j], v[4 + j] = hi[j];
  }
  // (code · 2^-p) · 2^p is the code exactly; then one fp32 product with the scale, as on the host.
  __align__(16) __nv_bfloat16 o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16_rn(v[j] * Layout<F>::kUnscale * scale);
  *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(o);
}

template <QuantFormat F>
void launch_experts(const float* x, float* act, int64_t hidden, int64_t top_k, const MoeGroupedScratch& s,
                    unsigned expert_slots, const QuantMatrix* gate_w, const QuantMatrix* up_w,
                    const QuantMatrix* down_w, int64_t inter, cudaStream_t stream) {
  constexpr int kGateUpRows = kWarps * kStreams / 2, kDownRows = kWarps * kStreams;
  launch_dependent(quant_expert_kernel<F, Mode::kGateUp>,
                   dim3(static_cast<unsigned>((inter + kGateUpRows - 1) / kGateUpRows), expert_slots), kWarps * 32, 0,
                   stream, x, static_cast<int>(top_k), s.sorted, s.offsets, s.active, s.num_active, gate_w, up_w, act,
                   static_cast<float*>(nullptr));
  launch_dependent(quant_expert_kernel<F, Mode::kDown>,
                   dim3(static_cast<unsigned>((hidden + kDownRows - 1) / kDownRows), expert_slots), kWarps * 32, 0,
                   stream, static_cast<const float*>(act), static_cast<int>(top_k), s.sorted, s.offsets, s.active,
                   s.num_active, down_w, static_cast<const QuantMatrix*>(nullptr), static_cast<float*>(nullptr), s.y);
}

template <QuantFormat F>
void launch_dense(const QuantMatrix& w, const QuantMatrix& w2, const float* x, int64_t x_row, int64_t tokens,
                  float* out, float* out2, int num_sms, cudaStream_t s, int slices) {
  if (slices <= 0) slices = quant_gemv_slices(w.n + w2.n, num_sms);
  const int64_t row_groups = (w.n + w2.n) / kStreams;
  const int groups = kWarps / slices;
  const dim3 grid(static_cast<unsigned>((row_groups + groups - 1) / groups));
  const int t = static_cast<int>(tokens);
  if (w2.n > 0)  // pairs: one token (launch_quant_gemv checked)
    launch_dependent(quant_gemv_kernel<F, 1, true>, grid, kWarps * 32, 0, s, w, w2, x, x_row, t, out, out2, slices);
  else if (tokens <= 1)
    launch_dependent(quant_gemv_kernel<F, 1, false>, grid, kWarps * 32, 0, s, w, w2, x, x_row, t, out, out2, slices);
  else if (tokens <= 2)
    launch_dependent(quant_gemv_kernel<F, 2, false>, grid, kWarps * 32, 0, s, w, w2, x, x_row, t, out, out2, slices);
  else if (tokens <= 4)
    launch_dependent(quant_gemv_kernel<F, 4, false>, grid, kWarps * 32, 0, s, w, w2, x, x_row, t, out, out2, slices);
  else
    launch_dependent(quant_gemv_kernel<F, 8, false>, grid, kWarps * 32, 0, s, w, w2, x, x_row, t, out, out2, slices);
}

}  // namespace

void launch_dequant_bf16(const QuantMatrix& w, __nv_bfloat16* out, cudaStream_t s) {
  const int64_t threads = static_cast<int64_t>(w.n) * w.k / 8;
  const dim3 grid(static_cast<unsigned>((threads + 255) / 256));
  if (threads == 0) return;
  if (w.format == QuantFormat::kNvfp4)
    launch_plain(dequant_kernel<QuantFormat::kNvfp4>, grid, 256, 0, s, w, out);
  else
    launch_plain(dequant_kernel<QuantFormat::kFp8Block>, grid, 256, 0, s, w, out);
}

bool quant_gemv_supported(const QuantMatrix& w) {
  if (w.n % kStreams != 0) return false;
  if (w.format == QuantFormat::kNvfp4) return w.k % Layout<QuantFormat::kNvfp4>::kVals == 0;
  return w.k % Layout<QuantFormat::kFp8Block>::kVals == 0 && w.block_cols % 16 == 0 && w.block_rows >= 1;
}

int quant_gemv_slices(int64_t rows, int num_sms) {
  // The K split whose grid best covers the GPU twice: few rows (kv_a: 144 row groups) take 8 warps
  // a group, many rows one.
  const int64_t row_groups = rows / kStreams;
  int slices = 1;
  while (slices < kWarps && (row_groups * slices + kWarps - 1) / kWarps < 2 * num_sms) slices *= 2;
  return slices;
}

void launch_quant_gemv(const QuantMatrix& w, const float* x, int64_t x_row, int64_t tokens, float* out, int num_sms,
                       cudaStream_t s, const QuantMatrix* w2, float* out2, int slices) {
  QuantMatrix none = w;
  none.n = 0;  // no second matrix: no rows of it
  const QuantMatrix& second = w2 != nullptr ? *w2 : none;
  TESSERA_CHECK(w2 == nullptr || (tokens == 1 && out2 != nullptr && quant_gemv_pair_supported(w, *w2)),
                "launch_quant_gemv: a second matrix needs one token, an output and the first one's format and width");
  TESSERA_CHECK(slices <= 0 || slices == 1 || slices == 2 || slices == 4 || slices == kWarps,
                "launch_quant_gemv: K split {} is not 1, 2, 4 or 8", slices);
  if (w.format == QuantFormat::kNvfp4)
    launch_dense<QuantFormat::kNvfp4>(w, second, x, x_row, tokens, out, out2, num_sms, s, slices);
  else
    launch_dense<QuantFormat::kFp8Block>(w, second, x, x_row, tokens, out, out2, num_sms, s, slices);
}

bool quant_gemv_pair_supported(const QuantMatrix& a, const QuantMatrix& b) {
  return quant_gemv_supported(a) && quant_gemv_supported(b) && a.format == b.format && a.k == b.k &&
         a.block_cols == b.block_cols;
}

bool moe_quant_supported(const QuantMatrix& gate, const QuantMatrix& down, int64_t experts) {
  return experts <= 1024 && quant_gemv_supported(gate) && quant_gemv_supported(down) && gate.n % 2 == 0;
}

void launch_moe_quant_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots, int64_t experts,
                              QuantFormat format, const QuantMatrix* gate_w, const QuantMatrix* up_w,
                              const QuantMatrix* down_w, int64_t inter, float* act, const MoeGroupedScratch& s,
                              cudaStream_t stream) {
  const int64_t pairs = tokens * slots.per_token();
  if (pairs == 0) return;
  launch_moe_prepare(x, tokens, hidden, slots, experts, s, stream);
  const unsigned expert_slots = static_cast<unsigned>(std::min<int64_t>(experts, pairs));
  if (format == QuantFormat::kNvfp4)
    launch_experts<QuantFormat::kNvfp4>(x, act, hidden, slots.per_token(), s, expert_slots, gate_w, up_w, down_w, inter,
                                        stream);
  else
    launch_experts<QuantFormat::kFp8Block>(x, act, hidden, slots.per_token(), s, expert_slots, gate_w, up_w, down_w,
                                           inter, stream);
}

}  // namespace tessera::ops::cuda
