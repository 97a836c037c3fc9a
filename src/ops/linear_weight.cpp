#include "ops/linear_weight.h"

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera::ops {

void LinearWeight::dequant_row(int64_t row, float* dst) const {
  switch (format) {
    case Format::kDense: {
      const size_t es = core::dtype_size(weight.dtype());
      const auto* src = weight.data<uint8_t>() + static_cast<size_t>(row * in) * es;
      core::convert_to_f32(weight.dtype(), src, dst, static_cast<size_t>(in));
      return;
    }
    case Format::kFp8Block: {
      const uint8_t* w = weight.data<uint8_t>() + row * in;
      const int64_t scale_cols = scale.dim(1);
      const float* s = scale.data<float>() + (row / block_rows) * scale_cols;
      for (int64_t j = 0; j < in; ++j) dst[j] = core::fp8_e4m3_to_f32(w[j]) * s[j / block_cols];
      return;
    }
    case Format::kNvfp4: {
      const uint8_t* w = weight.data<uint8_t>() + row * (in / 2);
      const uint8_t* s = scale.data<uint8_t>() + row * (in / group_size);
      for (int64_t g = 0; g < in / group_size; ++g) {
        // Per-block scale = fp8 block scale x global scale, multiplied in fp32 as ModelOpt does.
        const float block_scale = core::fp8_e4m3_to_f32(s[g]) * global_scale;
        for (int64_t j = g * group_size; j < (g + 1) * group_size; j += 2) {
          const uint8_t byte = w[j / 2];
          dst[j] = core::e2m1_to_f32(byte & 0x0f) * block_scale;
          dst[j + 1] = core::e2m1_to_f32(byte >> 4) * block_scale;
        }
      }
      return;
    }
  }
  core::fail("{}: unknown weight format", name);
}

uint64_t LinearWeight::stored_bytes() const {
  return weight.nbytes() + (scale.defined() ? scale.nbytes() : 0) + (format == Format::kNvfp4 ? 8 : 0);
}

std::string LinearWeight::format_name() const {
  switch (format) {
    case Format::kDense: return std::string(core::dtype_name(weight.dtype()));
    case Format::kFp8Block: return fmt::format("fp8-block{}x{}", block_rows, block_cols);
    case Format::kNvfp4: return fmt::format("nvfp4-g{}", group_size);
  }
  return "?";
}

}  // namespace tessera::ops
