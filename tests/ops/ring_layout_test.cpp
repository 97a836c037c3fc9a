// The shared-memory ring of the quantized expert kernels (ops/cuda/kernels/quant/ring_layout.h,
// grouped_ring.cu), checked on the host: TMA's alignment rules, boxes that tile a stage, the
// 128-byte swizzle as the hardware applies it, the rows the consumer warps read, and 16-byte reads
// free of bank conflicts. The kernel itself runs only on a GPU (run.sh tests / ring).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "ops/cuda/kernels/quant/ring_layout.h"

namespace tessera {
namespace {

using ops::cuda::quant_mma::kLinearMaxSlices;
using ops::cuda::quant_mma::kRowsPerWarp;
using ops::cuda::quant_mma::kWarps;
using ops::cuda::quant_mma::linear_ring_slices;
using ops::cuda::quant_mma::ring_box_row;
using ops::cuda::quant_mma::ring_layout;
using ops::cuda::quant_mma::RingLayout;

struct Variant {
  const char* name;
  bool nvfp4, gate_up;
};
const Variant kVariants[] = {{"nvfp4 gate/up", true, true},
                             {"nvfp4 down", true, false},
                             {"fp8 gate/up", false, true},
                             {"fp8 down", false, false}};

TEST(RingLayout, BoxesAreAlignedAndTileTheStage) {
  for (const Variant& v : kVariants) {
    const RingLayout l = ring_layout(v.nvfp4, v.gate_up);
    std::vector<std::pair<int, int>> spans;  // [begin, end) of every box a stage holds
    for (int b = 0; b < l.boxes; ++b) {
      for (int u = 0; u < l.blocks; ++u) {
        EXPECT_EQ(l.code_box(b, u) % 1024, 0) << v.name;  // 128 B for TMA, 1024 B for the swizzle
        spans.push_back({l.code_box(b, u), l.code_box(b, u) + l.rows * l.code_row});
      }
      if (l.scale_row > 0) {
        EXPECT_EQ(l.scale_box(b) % 128, 0) << v.name;
        spans.push_back({l.scale_box(b), l.scale_box(b) + l.rows * l.scale_row});
      }
    }
    std::sort(spans.begin(), spans.end());
    int end = 0;
    for (const auto& [b, e] : spans) {
      EXPECT_EQ(b, end) << v.name << ": a gap or an overlap";
      end = e;
    }
    EXPECT_EQ(end, l.stage_bytes()) << v.name;  // what the producer announces to the full barrier
    EXPECT_EQ(l.stage_bytes() % 1024, 0) << v.name;
    // TMA boxes: at most 256 rows, inner extent a multiple of 16 bytes and, swizzled, 128 bytes.
    EXPECT_LE(l.rows, 256);
    EXPECT_EQ(l.code_row % 16, 0);
    if (l.swizzle) {
      EXPECT_EQ(l.code_row, 128);
    }
    // Three blocks an SM on an H200 (228 KB a multiprocessor, 1 KB of it the runtime's a block).
    EXPECT_LE(3 * (l.smem_bytes() + 1024), 228 * 1024) << v.name;
  }
}

TEST(RingLayout, SwizzledChunksAreWhereTma128ByteSwizzlePutsThem) {
  // The hardware's rule for a 1024-byte aligned box: address bits 4-6 are XORed with bits 7-9.
  auto tma_swizzle = [](int offset) { return offset ^ (((offset >> 7) & 7) << 4); };
  const RingLayout fp8 = ring_layout(false, true);
  ASSERT_TRUE(fp8.swizzle);
  for (int r = 0; r < fp8.rows; ++r)
    for (int j = 0; j < fp8.code_row / 16; ++j)
      EXPECT_EQ(fp8.chunk(r, j), tma_swizzle(r * 128 + 16 * j)) << r << " " << j;
  const RingLayout nvfp4 = ring_layout(true, true);
  ASSERT_FALSE(nvfp4.swizzle);
  for (int r = 0; r < nvfp4.rows; ++r)
    for (int j = 0; j < nvfp4.code_row / 16; ++j) EXPECT_EQ(nvfp4.chunk(r, j), r * nvfp4.code_row + 16 * j);
}

TEST(RingLayout, EveryRowOfABoxIsReadByOneWarpLaneAndStream) {
  for (const Variant& v : kVariants) {
    const RingLayout l = ring_layout(v.nvfp4, v.gate_up);
    const int streams = 2;                    // gate/up: the matrices (a box each); down: two row groups of one box
    std::multiset<std::pair<int, int>> seen;  // (box, row)
    for (int warp = 0; warp < kWarps; ++warp)
      for (int s = 0; s < streams; ++s)
        for (int g = 0; g < kRowsPerWarp; ++g) seen.insert({v.gate_up ? s : 0, ring_box_row(v.gate_up, warp, s, g)});
    EXPECT_EQ(static_cast<int>(seen.size()), l.boxes * l.rows) << v.name;
    for (int b = 0; b < l.boxes; ++b)
      for (int r = 0; r < l.rows; ++r) EXPECT_EQ(seen.count({b, r}), 1u) << v.name << " box " << b << " row " << r;
  }
}

// A 16-byte shared-memory read is served 8 lanes at a time; those 8 are free of bank conflicts
// when their 16-byte chunks fall in 8 different bank groups ((address / 16) % 8).
TEST(RingLayout, LanesReadTheirCodesWithoutBankConflicts) {
  for (const Variant& v : kVariants) {
    const RingLayout l = ring_layout(v.nvfp4, v.gate_up);
    for (int warp = 0; warp < kWarps; ++warp)
      for (int s = 0; s < 2; ++s)
        for (int load = 0; load < l.loads(); ++load)
          for (int phase = 0; phase < 4; ++phase) {
            std::set<int> groups;
            for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
              const int g = lane >> 2, c = lane & 3;
              const int r = ring_box_row(v.gate_up, warp, s, g);
              const int address = l.chunk(r, l.loads() * c + load);
              EXPECT_GE(address, r * l.code_row);
              EXPECT_LT(address, (r + 1) * l.code_row);
              groups.insert((address / 16) % 8);
            }
            EXPECT_EQ(groups.size(), 8u) << v.name << " warp " << warp << " stream " << s << " phase " << phase;
          }
  }
}

// linear_ring.cu's K split: every slice of the cluster gets stages (its sums would be zeros, but its
// block would hold an SM slot for nothing), each at least two once split, at most a portable
// cluster, and no more blocks than the SMs hold while more slices would fit.
TEST(RingLayout, DenseProjectionSlicesAreNeverEmptyAndFillTheSms) {
  for (int resident : {132, 264, 396, 16})
    for (int boxes = 1; boxes <= 200; boxes += 7)
      for (int k_stages = 1; k_stages <= 160; ++k_stages) {
        const int s = linear_ring_slices(boxes, k_stages, resident);
        const int per = (k_stages + s - 1) / s;
        ASSERT_GE(s, 1);
        ASSERT_LE(s, kLinearMaxSlices);
        EXPECT_LT((s - 1) * per, k_stages) << "an empty slice: " << boxes << " boxes, " << k_stages << " stages, " << s;
        if (s > 1) {
          EXPECT_GE(k_stages, 2 * s) << boxes << " boxes, " << k_stages << " stages";
          EXPECT_LE(s * boxes, resident) << boxes << " boxes, " << k_stages << " stages";
        }
      }
  // DeepSeek-V3's FP8 projections on 132 SMs at 2 and 3 blocks an SM (128-row boxes, 128-value
  // stages): o_proj [7168, 16384] 56 boxes, q_b [24576, 1536] 192, q_a [1536, 7168] 12, kv_a
  // [576, 7168] 5.
  EXPECT_EQ(linear_ring_slices(56, 128, 264), 4);
  EXPECT_EQ(linear_ring_slices(56, 128, 396), 7);
  EXPECT_EQ(linear_ring_slices(192, 12, 396), 2);
  EXPECT_EQ(linear_ring_slices(192, 12, 264), 1);
  EXPECT_EQ(linear_ring_slices(12, 56, 396), 8);
  EXPECT_EQ(linear_ring_slices(5, 56, 396), 8);
  // Short K: [.., 256] FP8 is 2 stages, one slice; 9 stages over 4 would leave the 4th empty (3 a
  // slice), so 3.
  EXPECT_EQ(linear_ring_slices(1, 2, 396), 1);
  EXPECT_EQ(linear_ring_slices(90, 9, 396), 3);
}

}  // namespace
}  // namespace tessera
