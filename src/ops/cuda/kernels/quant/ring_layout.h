// The shapes of the quantized tensor-core expert kernels (mma_tiles.cuh) and the shared-memory ring
// of grouped_ring.cu, where a stage lies and where a lane reads. Plain C++17 with no CUDA headers:
// the kernels and the host tests (tests/ops/ring_layout_test.cpp: alignment, sizes, bank conflicts)
// compile the same arithmetic.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_RING_HD __host__ __device__
#else
#define TESSERA_RING_HD
#endif

namespace tessera::ops::cuda::quant_mma {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 8;  // MMA N
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kTile = 16;            // pairs a tile: the MMA's M
constexpr int kDenseTileTokens = 8;  // a dense tile: each token's hi and lo rows
constexpr int kBlockK = 128;         // values of a row the warp's 4 lanes of a row cover per K block

constexpr int kRingStages = 4;

// A ring stage of `boxes` boxes (matrices) of `rows` rows: `blocks` K blocks of each row's codes
// (`code_row` bytes a row and K block), then each box's scales for the stage (`scale_row` bytes a
// row; FP8's block scales are read from global memory instead). Offsets are multiples of 1024 (TMA
// writes to 128-byte aligned shared memory; the 128-byte swizzle repeats every 1024).
//   NVFP4: 2 K blocks of 64-byte rows (lane (g, c) reads row g at byte 16c: 8 rows x 64 B = 512 B a
//          warp, no bank conflicts), 16 bytes of e4m3 scales a row;
//   FP8:   1 K block of 128-byte rows with the 128-byte swizzle (16-byte chunk j of row r stored at
//          chunk j ^ (r % 8)), so that the 8 rows a warp reads at one column fall in different banks.
struct RingLayout {
  int boxes, rows, blocks, code_row, scale_row;
  bool swizzle;
  TESSERA_RING_HD constexpr int code_box(int box, int block) const { return (box * blocks + block) * rows * code_row; }
  TESSERA_RING_HD constexpr int scale_box(int box) const {
    return boxes * blocks * rows * code_row + box * rows * scale_row;
  }
  TESSERA_RING_HD constexpr int stage_bytes() const { return scale_box(boxes); }
  // The stages, then a full and an empty mbarrier (8 bytes) for each.
  TESSERA_RING_HD constexpr int smem_bytes() const { return kRingStages * stage_bytes() + 2 * kRingStages * 8; }
  // Where 16-byte chunk j of row r lies in a code box.
  TESSERA_RING_HD constexpr int chunk(int r, int j) const { return r * code_row + 16 * (swizzle ? j ^ (r & 7) : j); }
  // The 16-byte chunks of a row a lane reads in a K block (lane c reads chunks loads * c + l).
  TESSERA_RING_HD constexpr int loads() const { return code_row / 64; }
};

// gate/up: 64 rows of both matrices; down: 128 rows of one (two row groups of 8 a warp).
TESSERA_RING_HD constexpr RingLayout ring_layout(bool nvfp4, bool gate_up) {
  return {gate_up ? 2 : 1,
          gate_up ? kRowsPerBlock : 2 * kRowsPerBlock,
          nvfp4 ? 2 : 1,
          nvfp4 ? kBlockK / 2 : kBlockK,
          nvfp4 ? 2 * kBlockK / 16 : 0,
          !nvfp4};
}

// Row of a box that lane g of `warp` reads for stream s (gate/up: the matrices; down: row groups).
TESSERA_RING_HD constexpr int ring_box_row(bool gate_up, int warp, int s, int g) {
  return gate_up ? warp * kRowsPerWarp + g : warp * 2 * kRowsPerWarp + kRowsPerWarp * s + g;
}

// The K slices of a dense projection on the ring (linear_ring.cu), the blocks of one cluster: as many
// as fit the SMs' `resident` blocks with `boxes` boxes of rows, each slice at least two of the
// `k_stages` stages long, at most kLinearMaxSlices (the portable cluster size), and none of them
// empty when the stages are dealt out ceil(k_stages / slices) a slice.
constexpr int kLinearMaxSlices = 8;
TESSERA_RING_HD constexpr int linear_ring_slices(int boxes, int k_stages, int resident) {
  int slices = 1;
  while (slices < kLinearMaxSlices && (slices + 1) * boxes <= resident && 2 * (slices + 1) <= k_stages) ++slices;
  while (slices > 1 && (slices - 1) * ((k_stages + slices - 1) / slices) >= k_stages) --slices;
  return slices;
}

}  // namespace tessera::ops::cuda::quant_mma
