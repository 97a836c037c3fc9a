// One rank of a tensor-parallel group whose other ranks do not run: `tessera bench decode
// --tensor-parallel-size N` times rank 0's share of a decode step on one GPU (its heads, its routed
// experts, its columns of the shared expert, its part of a sharded KV cache) without the GPUs the
// others would need. The collectives move nothing between ranks: all_reduce_sum leaves x as this
// rank's partial sum, reduce_scatter_cols gives this rank's columns of its own x, all_gather_cols
// fills every rank's columns of `out` with this rank's part (a
// device copy, so that what follows computes on finite numbers: the sharded attention's weights of
// the ranks' partials would overflow on stale memory). The numbers a model computes with it are not
// the model's; the work and the bytes this rank's kernels read are one rank's. Nothing but that
// benchmark uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

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
  void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) override {
    const int64_t rows = part.dim(0), cols = part.numel() / std::max<int64_t>(rows, 1);
    TESSERA_CHECK(out.numel() == rows * cols * size_, "lone rank all_gather_cols: part {} and out {} of {} ranks",
                  core::shape_str(part.shape()), core::shape_str(out.shape()), size_);
    // out [rows, size x cols] is [rows x size, cols]: row t x size + r is rank r's row t.
    std::vector<int64_t> source(static_cast<size_t>(rows * size_));
    for (int64_t i = 0; i < rows * size_; ++i) source[static_cast<size_t>(i)] = i / size_;
    core::Tensor flat = out.reshape({rows * size_, cols});
    ops.gather_rows(part.reshape({rows, cols}), source, flat);
  }
  void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) override {
    const int64_t rows = x.dim(0), total = x.numel() / std::max<int64_t>(rows, 1), cols = total / size_;
    TESSERA_CHECK(total % size_ == 0 && out.numel() == rows * cols,
                  "lone rank reduce_scatter_cols: x {} and out {} of {} ranks (equal column blocks only)",
                  core::shape_str(x.shape()), core::shape_str(out.shape()), size_);
    // x [rows, size x cols] is [rows x size, cols]: row t x size + rank is this rank's row t.
    std::vector<int64_t> source(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) source[static_cast<size_t>(t)] = t * size_ + rank_;
    core::Tensor flat = out.reshape({rows, cols});
    ops.gather_rows(x.reshape({rows * size_, cols}), source, flat);
  }

 private:
  int rank_, size_;
};

}  // namespace tessera::ops
