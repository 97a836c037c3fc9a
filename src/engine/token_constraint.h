// Constrained decoding as the engine sees it: a per-sample object that says which tokens may be
// drawn next and follows every token the sample emits. What the constraint is (a JSON Schema, a
// tool call in the model's own syntax) and when it starts (after the model's reasoning) is the
// caller's business: the server implements it (server/output_constraint.h) over text/constrain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace tessera::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Whether the next token is constrained (false while it is not, e.g. while the model reasons).
  virtual bool active() const = 0;
  // Only when active(): sets bit (i % 32) of word (i / 32) of `bitmask` iff token i may come next.
  // `bitmask` holds token_bitmask_words(vocab) words (the model's logits row) and is overwritten
  // whole.
  virtual void fill_allowed(std::span<uint32_t> bitmask) = 0;
  // Every token the sample emits, drawn or forced, in order. False when an active constraint did
  // not allow it (the constraint then no longer holds for this sample).
  virtual bool advance(int32_t token) = 0;
};

// Makes one TokenConstraint per sample of a request (n > 1 samples each parse their own text).
// Shared read-only between the request's copies of SamplingParams.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> create() const = 0;
};

inline size_t token_bitmask_words(int64_t vocab) { return (static_cast<size_t>(vocab) + 31) / 32; }
inline bool token_allowed(std::span<const uint32_t> bitmask, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) / 32 < bitmask.size() &&
         ((bitmask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u);
}

}  // namespace tessera::engine
