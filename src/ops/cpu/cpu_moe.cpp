// MoE routing and experts on the CPU (spec §3): sigmoid router with selection-only correction bias
// and group-limited top-k, then the routed experts combined with their (unbiased) weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace tessera::ops::cpu {

using core::Tensor;

void CpuOps::moe_route(const Tensor& x, const LinearWeight& gate, const Tensor& bias, const RouterConfig& cfg,
                       Tensor& ids, Tensor& weights) {
  const int64_t tokens = x.dim(0), E = cfg.experts, K = cfg.top_k, G = cfg.groups, per_group = E / G;
  Tensor logits = empty({tokens, E});
  linear(x, gate, logits);
  std::vector<float> b(static_cast<size_t>(E));
  core::convert_to_f32(bias.dtype(), bias.raw(), b.data(), b.size());
  core::parallel_for(tokens, [&](int64_t tb, int64_t te) {
    std::vector<float> score(static_cast<size_t>(E)), biased(static_cast<size_t>(E)),
        group_score(static_cast<size_t>(G));
    std::vector<int64_t> order(static_cast<size_t>(std::max(E, G)));
    for (int64_t t = tb; t < te; ++t) {
      const float* l = logits.data<float>() + t * E;
      for (int64_t e = 0; e < E; ++e) {
        score[e] = 1.0f / (1.0f + std::exp(-l[e]));
        biased[e] = score[e] + b[e];
      }
      if (G > 1) {
        // Group score = sum of the two best biased scores in the group; keep the top_groups best.
        for (int64_t g = 0; g < G; ++g) {
          float best = -INFINITY, second = -INFINITY;
          for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
            if (biased[e] > best) {
              second = best;
              best = biased[e];
            } else if (biased[e] > second) {
              second = biased[e];
            }
          }
          group_score[g] = best + second;
        }
        std::iota(order.begin(), order.begin() + G, 0);
        std::stable_sort(order.begin(), order.begin() + G,
                         [&](int64_t a, int64_t c) { return group_score[a] > group_score[c]; });
        std::vector<bool> keep(static_cast<size_t>(G), false);
        for (int64_t i = 0; i < cfg.top_groups; ++i) keep[order[i]] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!keep[e / per_group]) biased[e] = -INFINITY;
      }
      std::iota(order.begin(), order.begin() + E, 0);
      std::partial_sort(order.begin(), order.begin() + K, order.begin() + E, [&](int64_t a, int64_t c) {
        return biased[a] > biased[c] || (biased[a] == biased[c] && a < c);
      });
      float sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += score[order[k]];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = order[k];
        float w = score[e];
        if (cfg.normalize) w /= (sum + 1e-20f);
        ids.data<int32_t>()[t * K + k] = static_cast<int32_t>(e);
        weights.data<float>()[t * K + k] = w * cfg.scaling;
      }
    }
  });
}

void CpuOps::moe_experts(const Tensor& x, const std::vector<ExpertWeights>& experts, const Tensor& ids,
                         const Tensor& weights, Tensor& out, const ExpertWeights* shared) {
  const int64_t tokens = x.dim(0), hidden = x.dim(1), K = ids.dim(1);
  std::fill(out.data<float>(), out.data<float>() + out.numel(), 0.0f);
  // Group the (token, slot) pairs by expert so each expert runs once over its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(experts.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = ids.data<int32_t>()[t * K + k];
      TESSERA_CHECK(e >= 0 && static_cast<size_t>(e) < experts.size(), "moe_experts: expert id {} out of range", e);
      routed[static_cast<size_t>(e)].emplace_back(t, weights.data<float>()[t * K + k]);
    }
  for (size_t e = 0; e < experts.size(); ++e) {
    const auto& list = routed[e];
    if (list.empty() || !experts[e].held()) continue;
    const int64_t n = static_cast<int64_t>(list.size()), inter = experts[e].gate.out;
    Tensor xin = empty({n, hidden});
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(x.data<float>() + list[i].first * hidden, hidden, xin.data<float>() + i * hidden);
    Tensor g = empty({n, inter}), u = empty({n, inter});
    linear(xin, experts[e].gate, g);
    linear(xin, experts[e].up, u);
    Tensor act = empty({n, inter});
    silu_mul(g, u, act);
    Tensor y = empty({n, hidden});
    linear(act, experts[e].down, y);
    for (int64_t i = 0; i < n; ++i) {
      float* o = out.data<float>() + list[i].first * hidden;
      const float w = list[i].second;
      for (int64_t j = 0; j < hidden; ++j) o[j] += w * y.data<float>()[i * hidden + j];
    }
  }
  if (shared) {
    Tensor y = empty({tokens, hidden});
    mlp(x, *shared, y);
    add_inplace(out, y);
  }
}

}  // namespace tessera::ops::cpu
