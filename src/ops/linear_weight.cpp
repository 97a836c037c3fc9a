#include "ops/linear_weight.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera::ops {
namespace {

const float* fp8_e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = core::fp8_e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

const std::array<std::array<float, 2>, 256>& e2m1_pair_table() {
  static const auto table = [] {
    std::array<std::array<float, 2>, 256> t{};
    for (int b = 0; b < 256; ++b)
      t[static_cast<size_t>(b)] = {core::e2m1_to_f32(static_cast<uint8_t>(b & 0x0f)),
                                   core::e2m1_to_f32(static_cast<uint8_t>(b >> 4))};
    return t;
  }();
  return table;
}

}  // namespace

void LinearWeight::dequant_row(int64_t row, float* dst) const {
  switch (format) {
    case Format::kDense: {
      const size_t es = core::dtype_size(weight.dtype());
      const auto* src = weight.data<uint8_t>() + static_cast<size_t>(row * in) * es;
      core::convert_to_f32(weight.dtype(), src, dst, static_cast<size_t>(in));
      return;
    }
    case Format::kFp8Block: {
      // A block of columns at a time, the codes through a table: the values of
      // core::fp8_e4m3_to_f32, without a call per element (the CPU reference spends its time here).
      const float* table = fp8_e4m3_table();
      const uint8_t* w = weight.data<uint8_t>() + row * in;
      const int64_t scale_cols = scale.dim(1);
      const float* s = scale.data<float>() + (row / block_rows) * scale_cols;
      for (int64_t b = 0; b * block_cols < in; ++b) {
        const float sb = s[b];
        for (int64_t j = b * block_cols, end = std::min(in, (b + 1) * block_cols); j < end; ++j)
          dst[j] = table[w[j]] * sb;
      }
      return;
    }
    case Format::kNvfp4: {
      // Both e2m1 codes of a byte (first element in the low nibble) from a table of the 256 bytes.
      const auto& pairs = e2m1_pair_table();
      const uint8_t* w = weight.data<uint8_t>() + row * (in / 2);
      const uint8_t* s = scale.data<uint8_t>() + row * (in / group_size);
      const int64_t half = group_size / 2;
      for (int64_t g = 0; g < in / group_size; ++g) {
        // Per-block scale = fp8 block scale x global scale, multiplied in fp32 as ModelOpt does.
        const float block_scale = core::fp8_e4m3_to_f32(s[g]) * global_scale;
        const uint8_t* wg = w + g * half;
        float* d = dst + g * group_size;
        for (int64_t k = 0; k < half; ++k) {
          const auto& p = pairs[wg[k]];
          d[2 * k] = p[0] * block_scale;
          d[2 * k + 1] = p[1] * block_scale;
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
    case Format::kDense:
      return std::string(core::dtype_name(weight.dtype()));
    case Format::kFp8Block:
      return fmt::format("fp8-block{}x{}", block_rows, block_cols);
    case Format::kNvfp4:
      return fmt::format("nvfp4-g{}", group_size);
  }
  return "?";
}

}  // namespace tessera::ops
