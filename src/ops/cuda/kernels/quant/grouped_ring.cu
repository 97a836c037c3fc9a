// Routed NVFP4 experts on tensor cores with the weights streamed through a shared-memory ring
// (issue 15; sm_90a, the default there; TESSERA_EXPERT_RING=0 turns it off). grouped_mma.cu's kernels sit at ~50% of
// their bytes floor: each warp's chain load (DRAM) -> decode -> MMA is long and 14-26 warps an SM
// do not hide it, and more loads in registers cost occupancy (docs/PERFORMANCE.md). Here one
// producer warp keeps kStages stages of every weight row the block covers in flight by TMA
// (cp.async.bulk.tensor into shared memory, completion counted in bytes on a "full" mbarrier per
// stage), and the 8 consumer warps run grouped_mma.cu's decode and MMAs (quant_mma::k_block_dot) on
// codes read from shared memory, so the bytes in flight no longer depend on warps x registers and a
// consumer's chain is a shared-memory read long. Each consumer warp arrives on the stage's "empty"
// mbarrier when it has read it, and the producer refills it.
//
// Layout: a block covers kBoxRows weight rows (gate/up: 64 rows of both matrices; down: 128 rows,
// two row groups of 8 a warp sharing each activation fragment). A stage is kStageBlocks K blocks of
// 128 values: per box (matrix) a [rows x 64 B] code box per K block (one K block of a row's e2m1
// codes; lane (g, c) reads row g at byte 16c, 8 rows x 64 B = 512 B a warp: no bank conflicts) and
// one [rows x 16 B] scale box (the 16 e4m3 scales of the stage's 256 values). The tensor maps are
// built when the layer's expert table is (cuda/moe.cpp): per expert its gate, up and down codes and
// scales, [matrix][codes, scales][expert].
//
// The weights are the MMA's A operand (quant_mma::k_block_dot_wa): the warp's two streams' rows g
// fill A's 16 rows, so one MMA serves gate and up (or down's two row groups), and the pairs are B's
// 8 columns, each lane loading one pair's activations (16 bytes that are the B fragment as loaded).
// At decode sizes that is half the MMAs and activation loads of the activations-as-A tiles, which
// waste 15 of 16 rows at batch 1; at every size it spares the moves of the activations into A's
// register quads. An expert of up to 8 pairs takes one pass of one tile, else passes of two at
// decode sizes (at most a tile of 16 pairs an expert on average) and of 8 (64 pairs) at prefill
// sizes.
//
// Every wait is bounded (ring_sync.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_tiles.cuh"
#include "ops/cuda/kernels/quant/ring_maps.h"
#include "ops/cuda/kernels/quant/ring_sync.cuh"
#include "ops/cuda/ptx/tma_primitives.cuh"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

using namespace quant_mma;

constexpr int kThreads = (kWarps + 1) * 32;  // 8 consumer warps and the producer
constexpr int kStages = kRingStages;

template <QuantFormat F, bool kGateUp>
__host__ __device__ constexpr RingLayout ring_layout_of() {
  return ring_layout(F == QuantFormat::kNvfp4, kGateUp);
}

// The tensor map of `matrix` (0 gate, 1 up, 2 down), `kind` (0 codes, 1 scales), expert e.
__device__ __forceinline__ const void* ring_map(const uint8_t* maps, int experts, int matrix, int kind, int e) {
  return maps + static_cast<int64_t>((matrix * 2 + kind) * experts + e) * kRingTensorMapBytes;
}

// The pairs one pass over an expert's weights serves, of the `count` routed to it: MT tiles of 16;
// weights as A, one tile of 8 for up to 8 pairs, else two at decode sizes (MT 1) and 2 MT at
// prefill sizes (the same 16 MT pairs as activations as A: the same accumulators and loads, but no
// moves of the activations into the A operand's register quads, which interleave two pairs' rows).
template <bool kWeightsA, int MT>
__device__ __forceinline__ int ring_pass_pairs(int count) {
  if constexpr (!kWeightsA) return kTile * MT;
  return count <= kRowsPerWarp ? kRowsPerWarp : MT == 1 ? 2 * kRowsPerWarp : kTile * MT;
}

// One block per (box of weight rows, active expert), over the expert's pairs in groups of MT tiles
// of 16; grouped_mma.cu's quant_expert_mma_kernel with the weights from the ring. Registers as ptxas
// chooses: holding NVFP4's decode build to the 3 blocks an SM its shared memory allows (3 rings of
// 72 KB) spilled 12 / 20 B (gate/up / down) and measured 2-3% slower at batch 16 and 128 on an H200
// than ptxas' 80 / 72 registers and 2 blocks (docs/PERFORMANCE.md).
template <QuantFormat F, bool kGateUp, bool kWeightsA, int MT, bool kEarly = false>
__global__ void __launch_bounds__(kThreads)
    quant_expert_ring_kernel(const __nv_bfloat16* __restrict__ a, int top_k, const int32_t* __restrict__ sorted,
                             const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                             const int32_t* __restrict__ num_active, const QuantMatrix* __restrict__ w0,
                             const QuantMatrix* __restrict__ w1, const uint8_t* __restrict__ maps, int experts,
                             __nv_bfloat16* __restrict__ act_out, float* __restrict__ y_out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr RingLayout L = ring_layout_of<F, kGateUp>();
  constexpr bool kNvfp4 = F == QuantFormat::kNvfp4;
  constexpr int kLoads = MmaLayout<F>::kLoads;  // 16-byte chunks of a lane's codes in a K block
  static_assert(L.loads() == kLoads, "a lane reads kLoads chunks of a code row");
  constexpr int S = 2;  // gate/up: the two matrices; down: two row groups of 8 a warp
  // Launched with launch_dependent. Down with kEarly (TESSERA_EXPERT_EARLY_DOWN): as
  // grouped_mma.cu's down kernel, the routing and the weights are read before the wait (the
  // producer fills the ring's stages while gate/up's last blocks run) and only the consumers wait,
  // before they read the activations.
  static_assert(!(kGateUp && kEarly), "gate/up reads the routing of the kernel just before it");
  if constexpr (!kEarly) pdl_wait();
  if (static_cast<int>(blockIdx.y) >= load_routing<kEarly>(num_active)) {
    if constexpr (kEarly) pdl_wait();
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = load_routing<kEarly>(active + blockIdx.y);
  const QuantMatrix& m0 = w0[e];
  const int n_dim = m0.n, k_dim = m0.k;
  const int row0 = static_cast<int>(blockIdx.x) * L.rows;
  const int begin = load_routing<kEarly>(offsets + e), end = load_routing<kEarly>(offsets + e + 1);
  const int k_stages = k_dim / (L.blocks * kBlockK);
  const int pass_pairs = ring_pass_pairs<kWeightsA, MT>(end - begin);
  const int groups = (end - begin + pass_pairs - 1) / pass_pairs;
  const uint32_t base = ring::smem_addr(smem);
  const ring::Barriers bars = ring::init_barriers(smem + kStages * L.stage_bytes(), kWarps);

  if (warp == kWarps) {  // the producer: one thread issues every copy
    if (lane != 0) return;
    const void* codes[2];
    const void* scales[2];
    for (int b = 0; b < L.boxes; ++b) {
      const int matrix = kGateUp ? b : 2;
      codes[b] = ring_map(maps, experts, matrix, 0, e);
      scales[b] = ring_map(maps, experts, matrix, 1, e);
      // The host wrote the maps into global memory: fence them before their first use.
      tma::fence_tensormap_acquire(codes[b]);
      tma::prefetch_map(codes[b]);
      if constexpr (kNvfp4) {
        tma::fence_tensormap_acquire(scales[b]);
        tma::prefetch_map(scales[b]);
      }
    }
    const uint64_t policy = tma::evict_first_policy();
    const int total = groups * k_stages;
    for (int it = 0; it < total; ++it) {
      const int st = it % kStages;
      // A fresh barrier's phase 1 counts as complete: the first pass over the ring does not wait.
      ring::wait(bars.empty(st), ((it / kStages) & 1) ^ 1);
      tma::mbarrier_arrive_expect_tx(bars.full(st), L.stage_bytes());
      const int ks = it % k_stages;
      const uint32_t dst = base + st * L.stage_bytes();
      for (int b = 0; b < L.boxes; ++b) {
        for (int u = 0; u < L.blocks; ++u)
          tma::load_2d(dst + L.code_box(b, u), codes[b], bars.full(st), (ks * L.blocks + u) * L.code_row, row0, policy);
        if constexpr (kNvfp4)
          tma::load_2d(dst + L.scale_box(b), scales[b], bars.full(st), ks * L.scale_row, row0, policy);
      }
    }
    return;
  }

  // The consumers. Lane (g, c): stream s's row in the box, and the first weight row of the warp.
  if constexpr (kEarly) pdl_wait();  // the activations are the kernel before's output
  const int g = lane >> 2, c = lane & 3;
  auto box_of = [](int s) { return kGateUp ? s : 0; };
  auto box_row = [&](int s) { return ring_box_row(kGateUp, warp, s, g); };
  const int n0 = row0 + (kGateUp ? warp * kRowsPerWarp : warp * 2 * kRowsPerWarp);
  const float g0 = m0.global_scale * MmaLayout<F>::kSumUnbias;
  const float g1 = kGateUp ? w1[e].global_scale * MmaLayout<F>::kSumUnbias : 0.0f;
  // FP8: each stream's row of block scales (one fp32 per K block for the warp's 8 rows), from global
  // memory: a few bytes a K block, served by L1.
  quant::RowRef ref[S];
#pragma unroll
  for (int s = 0; s < S; ++s)
    ref[s] = quant::row_ref<F>(kGateUp && s == 1 ? w1[e] : m0, min(row0 + box_row(s), n_dim - 1));
  int it = 0;
  // One pass of the K stages through the ring: each K block's raw codes and scales of both streams
  // go to dot(raw, sc, k).
  auto stream_k = [&](auto&& dot) {
    consume_stages<F, S>(smem, L, bars, 0, k_stages, it, c, lane, box_of, box_row, ref, dot);
  };
  // Weights as A: NT tiles of 8 pairs a pass.
  auto pass_wa = [&](int m0i, auto nt) {
    constexpr int NT = decltype(nt)::value;
    const __nv_bfloat16* tok[NT];
    tile_rows_wa<kGateUp, NT>(a, k_dim, top_k, sorted, m0i, end, g, tok);
    float acc[1][NT][4];
    zero(acc);
    stream_k([&](const uint4(&raw)[S][kLoads], const uint32_t(&sc)[S], int k) {
      k_block_dot_wa<F, NT>(raw, sc, k, tok, acc[0]);
    });
    store_tiles_wa<kGateUp, NT>(acc[0], m0i, end, g, c, n0, n_dim, g0, g1, sorted, act_out, y_out);
  };
  const int pass = ring_pass_pairs<kWeightsA, MT>(end - begin);
  for (int m0i = begin; m0i < end; m0i += pass) {
    if constexpr (kWeightsA) {
      if (pass == kRowsPerWarp)
        pass_wa(m0i, std::integral_constant<int, 1>{});
      else if (MT == 1)
        pass_wa(m0i, std::integral_constant<int, 2>{});
      else
        pass_wa(m0i, std::integral_constant<int, 2 * MT>{});
    } else {
      const __nv_bfloat16* lo[MT];
      const __nv_bfloat16* hi[MT];
      tile_rows<kGateUp, MT>(a, k_dim, top_k, sorted, m0i, end, g, lo, hi);
      float acc[S][MT][4];
      zero(acc);
      stream_k([&](const uint4(&raw)[S][kLoads], const uint32_t(&sc)[S], int k) {
        k_block_dot<F, S, MT>(raw, sc, k, lo, hi, acc);
      });
      // Rows past the matrix (zero-filled boxes) are not written.
      store_tiles<kGateUp, S, MT>(acc, m0i, end, g, c, n0, n_dim, g0, g1, sorted, act_out, y_out);
    }
  }
}

template <QuantFormat F, bool kWeightsA, int MT>
void launch_ring_kernels(const MoeGroupedScratch& s, int top_k, unsigned expert_slots, int64_t hidden, int64_t inter,
                         const QuantMatrix* gate_w, const QuantMatrix* up_w, const QuantMatrix* down_w,
                         const uint8_t* maps, int experts, cudaStream_t stream) {
  constexpr RingLayout gate_up = ring_layout_of<F, true>(), down = ring_layout_of<F, false>();
  allow_dynamic_smem(quant_expert_ring_kernel<F, true, kWeightsA, MT>, gate_up.smem_bytes());
  allow_dynamic_smem(quant_expert_ring_kernel<F, false, kWeightsA, MT>, down.smem_bytes());
  allow_dynamic_smem(quant_expert_ring_kernel<F, false, kWeightsA, MT, true>, down.smem_bytes());
  launch_dependent(quant_expert_ring_kernel<F, true, kWeightsA, MT>,
                   dim3(static_cast<unsigned>((inter + gate_up.rows - 1) / gate_up.rows), expert_slots), kThreads,
                   gate_up.smem_bytes(), stream, static_cast<const __nv_bfloat16*>(s.xb), top_k, s.sorted, s.offsets,
                   s.active, s.num_active, gate_w, up_w, maps, experts, s.act, static_cast<float*>(nullptr));
  // TESSERA_EXPERT_EARLY_DOWN: the instance that starts before gate/up has finished.
  auto down_kernel = expert_early_down() ? quant_expert_ring_kernel<F, false, kWeightsA, MT, true>
                                         : quant_expert_ring_kernel<F, false, kWeightsA, MT>;
  launch_dependent(down_kernel, dim3(static_cast<unsigned>((hidden + down.rows - 1) / down.rows), expert_slots),
                   kThreads, down.smem_bytes(), stream, static_cast<const __nv_bfloat16*>(s.act), top_k, s.sorted,
                   s.offsets, s.active, s.num_active, down_w, static_cast<const QuantMatrix*>(nullptr), maps, experts,
                   static_cast<__nv_bfloat16*>(nullptr), s.y);
}

}  // namespace

bool moe_quant_ring_supported(const QuantMatrix& gate, const QuantMatrix& down) {
  auto ok = [&](const QuantMatrix& m) {
    const RingLayout l = ring_layout(m.format == QuantFormat::kNvfp4, true);
    // FP8: a K block is one scale column, a warp's 8 rows one scale row (as grouped_mma.cu).
    const bool fp8_blocks =
        m.format == QuantFormat::kNvfp4 || (m.block_cols == kBlockK && m.block_rows % kRowsPerWarp == 0);
    return m.format == gate.format && m.k % (l.blocks * kBlockK) == 0 && m.n % kRowsPerWarp == 0 && fp8_blocks;
  };
  return ok(gate) && ok(down);
}

bool encode_ring_maps(const QuantMatrix& m, bool gate_up, CUtensorMap* codes, CUtensorMap* scales) {
  const RingLayout l = ring_layout(m.format == QuantFormat::kNvfp4, gate_up);
  // Rows of code bytes: NVFP4 two codes a byte; FP8 one.
  const uint64_t row_bytes = m.format == QuantFormat::kNvfp4 ? m.k / 2 : m.k, n = static_cast<uint64_t>(m.n);
  return encode_tensor_map_2d(codes, CU_TENSOR_MAP_DATA_TYPE_UINT8, m.data, row_bytes, n, row_bytes, l.code_row, l.rows,
                              l.swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE) &&
         (l.scale_row == 0 ||
          encode_tensor_map_2d(scales, CU_TENSOR_MAP_DATA_TYPE_UINT8, m.scale, static_cast<uint64_t>(m.k / 16), n,
                               static_cast<uint64_t>(m.scale_cols), l.scale_row, l.rows, CU_TENSOR_MAP_SWIZZLE_NONE));
}

void launch_moe_quant_ring_experts(const float* x, int64_t tokens, int64_t hidden, const MoeSlots& slots,
                                   int64_t experts, QuantFormat format, const QuantMatrix* gate_w,
                                   const QuantMatrix* up_w, const QuantMatrix* down_w, const uint8_t* maps,
                                   int64_t inter, const MoeGroupedScratch& s, cudaStream_t stream) {
  const int64_t pairs = tokens * slots.per_token();
  if (pairs == 0) return;
  launch_moe_prepare(x, tokens, hidden, slots, experts, s, stream);
  const unsigned expert_slots = static_cast<unsigned>(std::min<int64_t>(experts, pairs));
  const int top_k = static_cast<int>(slots.per_token()), e = static_cast<int>(experts);
  // At prefill sizes (more than a tile an expert on average) 64 pairs share each decoded fragment.
  // The weights are the MMA's A operand (TESSERA_EXPERT_WEIGHTS_A=0 makes them B, for A/B).
  const bool weights_a = expert_weights_a();
  const bool prefill = pairs > kTile * static_cast<int64_t>(expert_slots);
  auto launch = [&](auto kernels) {
    kernels(s, top_k, expert_slots, hidden, inter, gate_w, up_w, down_w, maps, e, stream);
  };
  constexpr QuantFormat kFp4 = QuantFormat::kNvfp4, kFp8 = QuantFormat::kFp8Block;
  if (format == kFp4) {
    if (weights_a)
      prefill ? launch(launch_ring_kernels<kFp4, true, 4>) : launch(launch_ring_kernels<kFp4, true, 1>);
    else
      prefill ? launch(launch_ring_kernels<kFp4, false, 4>) : launch(launch_ring_kernels<kFp4, false, 1>);
  } else {
    if (weights_a)
      prefill ? launch(launch_ring_kernels<kFp8, true, 4>) : launch(launch_ring_kernels<kFp8, true, 1>);
    else
      prefill ? launch(launch_ring_kernels<kFp8, false, 4>) : launch(launch_ring_kernels<kFp8, false, 1>);
  }
}

}  // namespace tessera::ops::cuda
