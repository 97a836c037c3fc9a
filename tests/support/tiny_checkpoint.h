// The tiny size of a make-checkpoint kind that tests write (2 layers: 1 dense + 1 MoE, 8 experts,
// hidden 256, vocabulary 1024), with the head count and dense width a test may want otherwise.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/checkpoint_presets.h"
#include "model/random_checkpoint.h"

namespace tessera::test {

struct TinyCheckpointSize {
  int64_t heads = 2;
  int64_t intermediate = 256;
};

// The layout of `kind_name` (a make-checkpoint --like name) at the tiny size.
inline model::CheckpointLayout tiny_checkpoint_layout(const std::string& kind_name, TinyCheckpointSize size = {}) {
  const auto kind = model::parse_checkpoint_kind(kind_name);
  EXPECT_TRUE(kind.has_value()) << kind_name;
  model::CheckpointDims d = model::real_dims(*kind);
  d.layers = 2;
  d.experts = 8;
  d.hidden = 256;
  d.vocab = 1024;
  d.moe_intermediate = 128;
  d.intermediate = size.intermediate;
  d.heads = size.heads;
  model::finalize_dims(*kind, d);
  return model::checkpoint_layout(*kind, d);
}

}  // namespace tessera::test
