// One rank of a tensor-parallel group whose other ranks do not run: `tessera bench decode
// --tensor-parallel-size N` times rank 0's share of a decode step on one GPU (its heads, its routed
// experts, its columns of the shared expert) without the GPUs the others would need. The
// collectives move nothing: all_reduce_sum leaves x as this rank's partial sum, all_gather_cols
// leaves `out` as it was (only this rank's columns would be its own). The numbers a model computes
// with it are not the model's; the work and the bytes this rank's kernels read are one rank's.
// Nothing but that benchmark uses it.
#pragma once

#include "core/error.h"
#include "ops/comm/communicator.h"

namespace tessera::ops {

class LoneRankCommunicator final : public Communicator {
 public:
  LoneRankCommunicator(int rank, int size) : rank_(rank), size_(size) {
    TESSERA_CHECK(rank >= 0 && rank < size, "lone rank {} of {}: no such rank", rank, size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Ops&, core::Tensor&) override {}
  void all_gather_cols(Ops&, const core::Tensor&, core::Tensor&) override {}

 private:
  int rank_, size_;
};

}  // namespace tessera::ops
