// Ops::sample on the CPU: the reference the CUDA kernel is tested against. It follows the
// definition in ops.h literally (sort, keep a prefix, walk in id order); the arithmetic is the one
// of sampling_rule.h. Compiled with -ffp-contract=off (src/ops/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/sample_args.h"

namespace tessera::ops::cpu {
namespace {

using namespace sampling;

struct Drawn {
  int32_t id = 0;
  float logprob = 0.0f;
};

Drawn sample_one(const float* x, int64_t n, const SampleRow& p) {
  const bool greedy = p.temperature == 0.0f;
  const float inv_t = greedy ? 1.0f : f_recip(p.temperature);
  std::vector<float> s(static_cast<size_t>(n));
  int64_t argmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = scaled_logit(x[i], inv_t);
    if (order_key(s[i]) > order_key(s[argmax])) argmax = i;  // strict: the first argmax wins
  }
  const float s_max = s[argmax];
  if (s_max == -INFINITY) return {0, -INFINITY};
  std::vector<uint64_t> mass(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mass[i] = token_mass(s[i], s_max);
  if (greedy) {
    uint64_t total = 0;
    for (uint64_t m : mass) total += m;
    return {static_cast<int32_t>(argmax), kept_logprob(0.0f, total)};
  }

  std::vector<bool> kept(static_cast<size_t>(n), true);
  const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
  if (k < n || p.top_p < 1.0f) {
    // (s descending, id ascending) as one integer: key in the high half, inverted id in the low.
    std::vector<uint64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      order[i] = uint64_t{order_key(s[i])} << 32 | (0xFFFFFFFFu - static_cast<uint32_t>(i));
    std::partial_sort(order.begin(), order.begin() + k, order.end(), std::greater<>());
    auto id_at = [&](int64_t j) { return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(order[j])); };
    int64_t keep = k;
    if (p.top_p < 1.0f) {
      uint64_t top_k_mass = 0;
      for (int64_t j = 0; j < k; ++j) top_k_mass += mass[id_at(j)];
      const double threshold = top_p_threshold(p.top_p, top_k_mass);
      uint64_t prefix = 0;
      for (keep = 0; keep < k;) {
        prefix += mass[id_at(keep++)];
        if (reaches_top_p(prefix, threshold)) break;
      }
    }
    std::fill(kept.begin(), kept.end(), false);
    for (int64_t j = 0; j < keep; ++j) kept[id_at(j)] = true;
  }

  uint64_t kept_mass = 0;
  for (int64_t i = 0; i < n; ++i)
    if (kept[i]) kept_mass += mass[i];
  const uint64_t target = draw_target(p.uniform, kept_mass);
  uint64_t cumulative = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept[i]) continue;
    cumulative += mass[i];
    if (cumulative > target) return {static_cast<int32_t>(i), kept_logprob(log_weight(s[i], s_max), kept_mass)};
  }
  return {static_cast<int32_t>(argmax), 0.0f};  // unreachable: target < kept_mass
}

}  // namespace

void CpuOps::mask_logits(core::Tensor& logits, std::span<const uint32_t> bitmask) {
  check_mask_args(logits, bitmask);
  const int64_t rows = logits.dim(0), vocab = logits.dim(1), words = (vocab + 31) / 32;
  float* x = logits.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < vocab; ++t)
      if (!((bitmask[static_cast<size_t>(r * words + t / 32)] >> (t % 32)) & 1u))
        x[r * vocab + t] = -std::numeric_limits<float>::infinity();
}

void CpuOps::sample(const core::Tensor& logits, std::span<const SampleRow> rows, core::Tensor& ids_out,
                    core::Tensor* logprob_out) {
  check_sample_args(logits, rows, ids_out, logprob_out);
  const int64_t n = logits.dim(1);
  core::parallel_for(
      static_cast<int64_t>(rows.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const Drawn d = sample_one(logits.data<float>() + r * n, n, rows[r]);
          ids_out.data<int32_t>()[r] = d.id;
          if (logprob_out) logprob_out->data<float>()[r] = d.logprob;
        }
      },
      1);
}

}  // namespace tessera::ops::cpu
