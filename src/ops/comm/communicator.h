// Collectives among the ranks of a tensor-parallel group (DESIGN.md "Many GPUs"). Each rank holds
// its own backend (Ops), weight shards and KV pages; the model calls these between its ops: one
// all-reduce after the attention output projection, one after the MoE / MLP, one all-gather of
// the vocabulary-sharded logits (and, with the KV cache sharded by position, two all-gathers and a
// reduce-scatter inside each attention). Every rank calls every collective in the same order.
// Implementations: InProcessGroup (ranks as threads of one process: the CPU reference, and ranks
// sharing one GPU in tests, through the host); NcclGroup (ranks on separate GPUs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tessera::ops {

// Columns [first, first + count) of rank `rank` when `total` are split over `size` ranks as the
// model splits the vocabulary and the heads (model::TensorParallel::range): contiguous and balanced,
// the first total % size ranks one more.
inline std::pair<int64_t, int64_t> balanced_cols(int64_t total, int size, int rank) {
  const int64_t base = total / size, extra = total % size;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x becomes the sum over the ranks of every rank's x: the same values, bit for bit, on every rank
  // (so that routing and sampling downstream agree). x lives on `ops`' device.
  virtual void all_reduce_sum(Ops& ops, core::Tensor& x) = 0;
  // out [rows, Σ cols_r] = the ranks' parts [rows, cols_r] side by side in rank order.
  virtual void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) = 0;
  // out [rows, cols_rank] = the sum over the ranks of their x [rows, total]'s columns of this rank,
  // the columns split over the ranks as all_gather_cols' parts are (contiguous, balanced: the first
  // total % size ranks one more). Half an all-reduce's traffic when each rank needs only its part
  // (the sharded KV cache's attention outputs, model/kv_shard.h).
  virtual void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) = 0;
};

// The ranks' communicators of one group, created together; the group outlives them.
class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual int size() const = 0;
  // The communicator of `rank`, to be used by the thread that drives that rank.
  virtual std::unique_ptr<Communicator> communicator(int rank) = 0;
  // Ends every current and later collective that waits on the host with an error naming `why`: a
  // rank that failed calls it, so that the others do not wait for it forever. (Collectives waiting
  // on a GPU end by their own timeout.)
  virtual void abort(const std::string& why) = 0;
};

}  // namespace tessera::ops
