// The argument checks of Ops::sample, shared by every backend so that a bad call fails the same
// way (with the parameter named) wherever it runs. Host code only.
#pragma once

#include <cmath>
#include <span>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/sampling_rule.h"

namespace tessera::ops {

// Ops::mask_logits: F32 [rows, vocab] and rows x ceil(vocab / 32) mask words.
inline void check_mask_args(const core::Tensor& logits, std::span<const uint32_t> bitmask) {
  TESSERA_CHECK(logits.rank() == 2 && logits.dtype() == core::DType::kF32,
                "mask_logits: logits must be F32 [rows, vocab], got {} {}", core::dtype_name(logits.dtype()),
                core::shape_str(logits.shape()));
  const int64_t words = logits.dim(0) * ((logits.dim(1) + 31) / 32);
  TESSERA_CHECK(static_cast<int64_t>(bitmask.size()) == words,
                "mask_logits: {} mask words for logits {} (need rows x ceil(vocab / 32) = {})", bitmask.size(),
                core::shape_str(logits.shape()), words);
}

inline void check_sample_args(const core::Tensor& logits, std::span<const SampleRow> rows, const core::Tensor& ids_out,
                              const core::Tensor* logprob_out) {
  TESSERA_CHECK(logits.rank() == 2 && logits.dtype() == core::DType::kF32,
                "sample: logits must be F32 [rows, vocab], got {} {}", core::dtype_name(logits.dtype()),
                core::shape_str(logits.shape()));
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  TESSERA_CHECK(static_cast<int64_t>(rows.size()) == n, "sample: {} rows of parameters for {} rows of logits",
                rows.size(), n);
  TESSERA_CHECK(vocab >= 1 && vocab <= sampling::kMaxVocab, "sample: vocab {} is outside [1, {}]", vocab,
                sampling::kMaxVocab);
  TESSERA_CHECK(ids_out.dtype() == core::DType::kI32 && ids_out.numel() == n,
                "sample: ids_out must be I32 with {} values, got {} {}", n, core::dtype_name(ids_out.dtype()),
                core::shape_str(ids_out.shape()));
  TESSERA_CHECK(!logprob_out || (logprob_out->dtype() == core::DType::kF32 && logprob_out->numel() == n),
                "sample: logprob_out must be F32 with {} values, got {} {}", n, core::dtype_name(logprob_out->dtype()),
                core::shape_str(logprob_out->shape()));
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRow& p = rows[r];
    // 1/temperature must be finite too: a temperature so small that it overflows would turn
    // every logit into ±inf.
    TESSERA_CHECK(p.temperature == 0.0f ||
                      (p.temperature > 0.0f && std::isfinite(p.temperature) && std::isfinite(1.0f / p.temperature)),
                  "sample: row {}: temperature must be 0 (greedy) or a positive finite number with a finite "
                  "reciprocal, got {}",
                  r, p.temperature);
    TESSERA_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "sample: row {}: top_p must be in (0, 1], got {}", r, p.top_p);
    TESSERA_CHECK(p.uniform >= 0.0 && p.uniform < 1.0, "sample: row {}: uniform must be in [0, 1), got {}", r,
                  p.uniform);
  }
}

}  // namespace tessera::ops
