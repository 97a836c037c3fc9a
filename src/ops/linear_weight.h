// A linear layer's weight in its checkpoint format, as views into the mapped checkpoint.
// y = x · Wᵀ with W [out, in]. The formats (shared/reference/formats.md):
//   dense:  weight BF16 / F16 / F32 [out, in]
//   FP8 block (DeepSeek): weight F8_E4M3 [out, in], scale F32 [ceil(out/br), ceil(in/bc)] (weight_scale_inv)
//   NVFP4 (ModelOpt): weight U8 [out, in/2] (two e2m1 codes per byte, first element in the LOW
//     nibble), scale F8_E4M3 [out, in/group] (weight_scale), global_scale F32 (weight_scale_2),
//     input_scale F32 (activation global scale; kept, not applied by weight-only paths)
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tessera::ops {

struct LinearWeight {
  enum class Format { kDense, kFp8Block, kNvfp4 };
  Format format = Format::kDense;
  std::string name;  // checkpoint module name, for messages
  int64_t out = 0;
  int64_t in = 0;
  core::Tensor weight;
  core::Tensor scale;
  float global_scale = 1.0f;
  float input_scale = 0.0f;
  int64_t block_rows = 128;  // FP8 block
  int64_t block_cols = 128;
  int64_t group_size = 16;  // NVFP4

  // Writes the exact fp32 values of row `row` (in elements) to `dst`.
  void dequant_row(int64_t row, float* dst) const;
  // The bytes this weight occupies on disk (weights and scales).
  uint64_t stored_bytes() const;
  std::string format_name() const;
};

}  // namespace tessera::ops
