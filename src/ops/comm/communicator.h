// Collectives among the ranks of a tensor-parallel group (DESIGN.md "Many GPUs"). Each rank holds
// its own backend (Ops), weight shards and KV pages; the model calls these between its ops: one
// all-reduce after the attention output projection, one after the MoE / MLP, one all-gather of
// the vocabulary-sharded logits. Every rank calls every collective in the same order.
// Implementations: InProcessGroup (ranks as threads of one process: the CPU reference, and ranks
// sharing one GPU in tests, through the host); NcclGroup (ranks on separate GPUs).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tessera::ops {

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
