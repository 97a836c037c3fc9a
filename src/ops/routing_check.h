// Whether a backend's MoE routing is one the reference router could have made from the same
// input: the self-check's test of moe_route (ops/checking_ops.h).
//
// Expert ids cannot be compared for equality: two experts whose selection scores lie within the
// backends' rounding of each other (a near-tie, common among hundreds of experts) may be chosen
// either way by a correct kernel. So the backend's choice for a token passes when every expert it
// picked is one the reference picked, or scores within `tie` of the reference's k-th pick, or lies
// in a group whose group score is within 2 · tie of the groups the reference kept (group-limited
// routing, where a near-tie between groups swaps whole groups). Garbage ids, duplicates and
// experts far down the order fail. The routing weights of the backend's experts are then compared
// with the reference's weights for those same experts (its scores, normalised over that set).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ops/deviation.h"
#include "ops/ops.h"

namespace tessera::ops {

struct RoutingCheck {
  std::string problem;  // empty: the ids are acceptable; else which token and expert, and why
  Deviation weights;    // of the backend's weights [T, top_k] against the reference's for its ids
};

// logits: the reference router's logits [T, experts] for the input; bias: the selection bias
// [experts]; ids / weights: the backend's routing [T, top_k].
RoutingCheck check_routing(std::span<const float> logits, std::span<const float> bias, const RouterConfig& cfg,
                           std::span<const int32_t> ids, std::span<const float> weights, double tie);

}  // namespace tessera::ops
