#include "ops/routing_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tessera::ops {

RoutingCheck check_routing(std::span<const float> logits, std::span<const float> bias, const RouterConfig& cfg,
                           std::span<const int32_t> ids, std::span<const float> weights, double tie) {
  const int64_t E = cfg.experts, K = cfg.top_k, G = std::max<int64_t>(cfg.groups, 1), per_group = E / G;
  TESSERA_CHECK(E > 0 && K > 0 && K <= E && E % G == 0 && static_cast<int64_t>(bias.size()) == E &&
                    logits.size() % static_cast<size_t>(E) == 0 && ids.size() == weights.size() &&
                    ids.size() == logits.size() / static_cast<size_t>(E) * static_cast<size_t>(K),
                "check_routing: {} logits, {} ids and {} weights for {} experts, top {}", logits.size(), ids.size(),
                weights.size(), E, K);
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  RoutingCheck result;
  std::vector<float> want(weights.size());
  std::vector<float> score(static_cast<size_t>(E)), biased(static_cast<size_t>(E)), group(static_cast<size_t>(G));
  std::vector<int64_t> order(static_cast<size_t>(std::max(E, G)));
  for (int64_t t = 0; t < T && result.problem.empty(); ++t) {
    // The reference's scores and its choice, as CpuOps::moe_route makes them (spec §3.1).
    for (int64_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[static_cast<size_t>(t * E + e)]));
      biased[e] = score[e] + bias[static_cast<size_t>(e)];
    }
    std::vector<bool> kept(static_cast<size_t>(G), true), near_group(static_cast<size_t>(G), true);
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        std::vector<float> s(biased.begin() + g * per_group, biased.begin() + (g + 1) * per_group);
        std::partial_sort(s.begin(), s.begin() + std::min<int64_t>(2, per_group), s.end(), std::greater<>());
        group[g] = s[0] + (per_group > 1 ? s[1] : 0.0f);
      }
      std::iota(order.begin(), order.begin() + G, 0);
      std::stable_sort(order.begin(), order.begin() + G, [&](int64_t a, int64_t c) { return group[a] > group[c]; });
      const float cutoff = group[order[cfg.top_groups - 1]];
      for (int64_t g = 0; g < G; ++g) {
        kept[g] = std::find(order.begin(), order.begin() + cfg.top_groups, g) != order.begin() + cfg.top_groups;
        near_group[g] = group[g] >= cutoff - 2 * tie;
      }
    }
    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + K, order.begin() + E, [&](int64_t a, int64_t c) {
      const float ba = kept[a / per_group] ? biased[a] : -INFINITY, bc = kept[c / per_group] ? biased[c] : -INFINITY;
      return ba > bc || (ba == bc && a < c);
    });
    const float kth = biased[order[K - 1]];
    // The backend's experts, judged against that choice.
    float sum = 0;
    for (int64_t k = 0; k < K && result.problem.empty(); ++k) {
      const int32_t e = ids[static_cast<size_t>(t * K + k)];
      if (e < 0 || e >= E) {
        result.problem = fmt::format("token {} slot {}: expert id {} is outside [0, {})", t, k, e, E);
        break;
      }
      for (int64_t j = 0; j < k; ++j)
        if (ids[static_cast<size_t>(t * K + j)] == e)
          result.problem = fmt::format("token {}: expert {} chosen twice (slots {} and {})", t, e, j, k);
      const bool chosen = std::find(order.begin(), order.begin() + K, e) != order.begin() + K;
      const int64_t g = e / per_group;
      if (result.problem.empty() && !chosen && !(biased[e] >= kth - tie) && !(!kept[g] && near_group[g]))
        result.problem = fmt::format(
            "token {}: expert {} (selection score {:.6g}) is not among the reference's top {} (the lowest of which "
            "scores {:.6g})",
            t, e, biased[e], K, kth);
      if (result.problem.empty() && !near_group[g])
        result.problem =
            fmt::format("token {}: expert {} is in group {}, which the reference's group scores exclude", t, e, g);
      if (result.problem.empty()) sum += score[e];
    }
    if (!result.problem.empty()) break;
    for (int64_t k = 0; k < K; ++k) {
      const float w = score[ids[static_cast<size_t>(t * K + k)]];
      want[static_cast<size_t>(t * K + k)] = (cfg.normalize ? w / (sum + 1e-20f) : w) * cfg.scaling;
    }
  }
  if (result.problem.empty()) result.weights = deviation(weights, want, K);
  return result;
}

}  // namespace tessera::ops
