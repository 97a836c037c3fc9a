// Dense NVFP4 / FP8-block projections of 1-16 tokens on the routed experts' ring (grouped_ring.cu),
// sm_90a: y [tokens, n] = x [tokens, k] · Wᵀ with the weights streamed through a shared-memory ring
// by TMA and consumed as the MMA's A operand (quant_mma::k_block_dot_wa). The register-streaming
// kernels of grouped_mma.cu and gemv.cu reach ~40-45% of copy bandwidth on these shapes (their
// loads wait in registers; docs/PERFORMANCE.md), the same latency-bound pattern the experts had.
//
// Exactness: the activations are not rounded. x = hi + lo (launch_f32_to_bf16_split), and the pairs
// of a tile (the MMA's 8 columns) are 4 tokens' hi and lo rows: pair 2j is token j's hi, 2j + 1 its
// lo, so in k_block_dot_wa's C fragment a token's two sums are registers 0 and 1 (row g) and 2 and 3
// (row g + 8) of the same lane, added before anything leaves it.
//
// A block covers 128 weight rows (the down kernel's box: two row groups of 8 a warp) over a slice
// of K. A dense weight is one "expert": o_proj [7168, 16384] is 56 boxes of rows for 132 SMs, so K
// is split among the blocks of a cluster (up to 8, along y), and the cluster adds its partial sums
// through distributed shared memory, in slice order (deterministic: no atomics), each block
// finishing an equal share of the tokens x rows.
//
// The tensor maps are kernel parameters (__grid_constant__), made once per weight on the host.
// Every wait is bounded: a protocol error traps instead of hanging the device.
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_tiles.cuh"
#include "ops/cuda/kernels/quant/ring_sync.cuh"
#include "ops/cuda/ptx/tma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"
#include "ops/cuda/kernels/quant/ring_maps.h"
#include "ops/cuda/runtime/tensor_map.h"

namespace tessera::ops::cuda {

namespace {

using namespace quant_mma;

constexpr int kThreads = (kWarps + 1) * 32;  // 8 consumer warps and the producer
constexpr int kStages = kRingStages;
constexpr int kTokensPerTile = kRowsPerWarp / 2;  // a tile's 8 pairs: 4 tokens' hi and lo

template <QuantFormat F>
__host__ __device__ constexpr RingLayout linear_layout() {
  return ring_layout(F == QuantFormat::kNvfp4, false);
}

// A block's partial sums ([token][row] fp32) go to the ring's memory once every stage is read.
static_assert(kQuantMmaMaxTokens * 2 * kRowsPerBlock * 4 <= kStages * ring_layout(false, false).stage_bytes() &&
                  kQuantMmaMaxTokens * 2 * kRowsPerBlock * 4 <= kStages * ring_layout(true, false).stage_bytes(),
              "the partial sums fit in the ring");

// Grid (boxes of 128 rows, slices of K), clusters of `slices` along y. NT tiles of 4 tokens.
template <QuantFormat F, int NT>
__global__ void __launch_bounds__(kThreads)
    quant_linear_ring_kernel(const __grid_constant__ CUtensorMap codes_map,
                             const __grid_constant__ CUtensorMap scales_map, const QuantMatrix w,
                             const __nv_bfloat16* __restrict__ x_hi, const __nv_bfloat16* __restrict__ x_lo, int tokens,
                             float* __restrict__ y) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr RingLayout L = linear_layout<F>();
  constexpr bool kNvfp4 = F == QuantFormat::kNvfp4;
  constexpr int kLoads = MmaLayout<F>::kLoads;
  static_assert(L.loads() == kLoads, "a lane reads kLoads chunks of a code row");
  pdl_wait();  // first: launched with launch_dependent_cluster
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slices = static_cast<int>(gridDim.y), slice = static_cast<int>(blockIdx.y);
  const int row0 = static_cast<int>(blockIdx.x) * L.rows;
  const int k_stages = w.k / (L.blocks * kBlockK);
  const int per = (k_stages + slices - 1) / slices;
  const int ks_begin = min(k_stages, slice * per), ks_end = min(k_stages, ks_begin + per);
  const uint32_t base = ring::smem_addr(smem);
  const ring::Barriers bars = ring::init_barriers(smem + kStages * L.stage_bytes(), kWarps);

  if (warp == kWarps) {  // the producer: one thread issues every copy; it takes no part below
    if (lane == 0) {
      tma::prefetch_map(&codes_map);
      if constexpr (kNvfp4) tma::prefetch_map(&scales_map);
      const uint64_t policy = tma::evict_first_policy();
      for (int ks = ks_begin, it = 0; ks < ks_end; ++ks, ++it) {
        const int st = it % kStages;
        // A fresh barrier's phase 1 counts as complete: the first pass over the ring does not wait.
        ring::wait(bars.empty(st), ((it / kStages) & 1) ^ 1);
        tma::mbarrier_arrive_expect_tx(bars.full(st), L.stage_bytes());
        const uint32_t dst = base + st * L.stage_bytes();
        for (int u = 0; u < L.blocks; ++u)
          tma::load_2d(dst + L.code_box(0, u), &codes_map, bars.full(st), (ks * L.blocks + u) * L.code_row, row0,
                       policy);
        if constexpr (kNvfp4)
          tma::load_2d(dst + L.scale_box(0), &scales_map, bars.full(st), ks * L.scale_row, row0, policy);
      }
    }
  } else {
    // The consumers. Lane (g, c): row g of each of the warp's two row groups (streams); pair g of a
    // tile is token 4t + g / 2's hi (g even) or lo (g odd) row.
    const int g = lane >> 2, c = lane & 3;
    auto row = [&](int s) { return ring_box_row(false, warp, s, g); };
    quant::RowRef ref[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) ref[s] = quant::row_ref<F>(w, min(row0 + row(s), w.n - 1));
    const __nv_bfloat16* tok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int token = kTokensPerTile * t + g / 2;
      tok[t] = token < tokens ? (g % 2 ? x_lo : x_hi) + static_cast<int64_t>(token) * w.k : nullptr;
    }
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][i] = 0.0f;
    int it = 0;
    consume_stages<F, 2>(
        smem, L, bars, ks_begin, ks_end, it, c, lane, [](int) { return 0; }, row, ref,
        [&](const uint4(&raw)[2][kLoads], const uint32_t(&sc)[2], int k) {
          k_block_dot_wa<F, NT>(raw, sc, k, tok, acc);
        });
    // Every stage has been read by every consumer (and so written by every copy) once the
    // consumers meet: the ring's memory then holds this block's sums, part[token][row].
    asm volatile("bar.sync 1, %0;" ::"n"(kWarps * 32) : "memory");
    float* part = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int token = kTokensPerTile * t + c;
      if (token >= tokens) continue;
#pragma unroll
      for (int s = 0; s < 2; ++s) part[token * L.rows + row(s)] = acc[t][2 * s] + acc[t][2 * s + 1];
    }
  }
  // The cluster's partial sums, added in slice order; block `slice` finishes every slices-th
  // element (the cluster's block rank is blockIdx.y: clusters of 1 x gridDim.y).
  ring::cluster_sync();
  if (warp < kWarps) {
    const float f = w.global_scale * MmaLayout<F>::kSumUnbias;
    const int elements = tokens * L.rows;
    for (int i = slice * kWarps * 32 + static_cast<int>(threadIdx.x); i < elements; i += slices * kWarps * 32) {
      const int token = i / L.rows, row = row0 + i % L.rows;
      float sum = 0.0f;
      for (int r = 0; r < slices; ++r) sum += ring::load_cluster_f32(base + 4 * i, static_cast<uint32_t>(r));
      if (row < w.n) y[static_cast<int64_t>(token) * w.n + row] = sum * f;
    }
  }
  ring::cluster_sync();  // no block leaves while another may still read its sums
}

// Blocks of `kernel` an SM holds (its registers and the ring's shared memory), asked once per kernel.
template <QuantFormat F, int NT>
int resident_blocks() {
  static const int blocks = [] {
    auto kernel = quant_linear_ring_kernel<F, NT>;
    allow_dynamic_smem(kernel, linear_layout<F>().smem_bytes());
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, linear_layout<F>().smem_bytes()) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      n = 1;
    }
    return std::max(n, 1);
  }();
  return blocks;
}

template <QuantFormat F, int NT>
void launch_tiles(const CUtensorMap& codes, const CUtensorMap& scales, const QuantMatrix& w, const __nv_bfloat16* x_hi,
                  const __nv_bfloat16* x_lo, int tokens, float* y, int num_sms, cudaStream_t stream) {
  constexpr RingLayout L = linear_layout<F>();
  const int boxes = (w.n + L.rows - 1) / L.rows, k_stages = w.k / (L.blocks * kBlockK);
  const int slices = linear_ring_slices(boxes, k_stages, resident_blocks<F, NT>() * num_sms);
  allow_dynamic_smem(quant_linear_ring_kernel<F, NT>, L.smem_bytes());  // per device
  launch_dependent_cluster(quant_linear_ring_kernel<F, NT>, dim3(static_cast<unsigned>(boxes), slices), kThreads,
                           L.smem_bytes(), stream, dim3(1, static_cast<unsigned>(slices)), codes, scales, w, x_hi, x_lo,
                           tokens, y);
}

// Tiles of 4 tokens (a tile's 8 pairs are their hi and lo rows), all in one pass over the weights.
template <QuantFormat F>
void launch_format(const CUtensorMap& codes, const CUtensorMap& scales, const QuantMatrix& w, const __nv_bfloat16* x_hi,
                   const __nv_bfloat16* x_lo, int tokens, float* y, int num_sms, cudaStream_t stream) {
  switch ((tokens + kTokensPerTile - 1) / kTokensPerTile) {
    case 1:
      return launch_tiles<F, 1>(codes, scales, w, x_hi, x_lo, tokens, y, num_sms, stream);
    case 2:
      return launch_tiles<F, 2>(codes, scales, w, x_hi, x_lo, tokens, y, num_sms, stream);
    case 3:
      return launch_tiles<F, 3>(codes, scales, w, x_hi, x_lo, tokens, y, num_sms, stream);
    default:
      return launch_tiles<F, 4>(codes, scales, w, x_hi, x_lo, tokens, y, num_sms, stream);
  }
}

// The maps of a weight, made once per (codes, scales, format, shape): the driver call costs
// microseconds of host time a projection and step. A map encodes only addresses, format and shape,
// so a weight at a reused address gets the right one. False when they cannot be made.
bool linear_maps(const QuantMatrix& w, CUtensorMap& codes, CUtensorMap& scales) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, const void*, QuantFormat, int, int>,
                  std::tuple<bool, CUtensorMap, CUtensorMap>>
      maps;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = maps.try_emplace({w.data, w.scale, w.format, w.n, w.k});
  auto& [ok, c, s] = it->second;
  if (added) {
    c = CUtensorMap{};
    s = CUtensorMap{};
    ok = encode_ring_maps(w, /*gate_up=*/false, &c, &s);
  }
  codes = c;
  scales = s;
  return ok;
}

}  // namespace

bool quant_linear_ring_supported(const QuantMatrix& w) {
  const RingLayout l = ring_layout(w.format == QuantFormat::kNvfp4, false);
  const bool fp8_blocks =
      w.format == QuantFormat::kNvfp4 || (w.block_cols == kBlockK && w.block_rows % kRowsPerWarp == 0);
  return w.k % (l.blocks * kBlockK) == 0 && w.n % kRowsPerWarp == 0 && fp8_blocks;
}

bool launch_quant_linear_ring(const QuantMatrix& w, const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo,
                              int64_t tokens, float* y, int num_sms, cudaStream_t stream) {
  if (tokens <= 0 || tokens > kQuantMmaMaxTokens) return false;
  CUtensorMap codes, scales;
  if (!linear_maps(w, codes, scales)) return false;
  if (w.format == QuantFormat::kNvfp4)
    launch_format<QuantFormat::kNvfp4>(codes, scales, w, x_hi, x_lo, static_cast<int>(tokens), y, num_sms, stream);
  else
    launch_format<QuantFormat::kFp8Block>(codes, scales, w, x_hi, x_lo, static_cast<int>(tokens), y, num_sms, stream);
  return true;
}

}  // namespace tessera::ops::cuda
