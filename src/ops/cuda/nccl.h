// NCCL communicators for tensor-parallel ranks on separate GPUs of one process (issue 17, DESIGN.md
// "Many GPUs"): the production path of ops::Communicator. One rank per GPU, created together by
// ncclCommInitAll; each rank's collectives run on its backend's stream, so they are ordered with
// its kernels and can be captured into its decode-step graphs. NCCL's own tuning picks the
// algorithm; no environment variable is needed. (Ranks as processes on several hosts would use
// ncclCommInitRank with a bootstrap id instead: the calls below stay the same.)
// Built only where NCCL was found (TESSERA_HAVE_NCCL); this header needs no NCCL or CUDA headers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/comm/communicator.h"

namespace tessera::ops::cuda {

class NcclGroup final : public CommGroup {
 public:
  // Rank r on CUDA device devices[r]; throws core::Error naming NCCL's message on failure.
  explicit NcclGroup(std::vector<int> devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int size() const override { return static_cast<int>(devices_.size()); }
  // The communicator of `rank`, for the thread that drives that rank's backend (created on
  // devices[rank]). Valid while the group lives.
  std::unique_ptr<Communicator> communicator(int rank) override;
  // NCCL's collectives run on the GPU; nothing waits on the host.
  void abort(const std::string&) override {}

 private:
  std::vector<int> devices_;
  std::vector<void*> comms_;  // ncclComm_t, one per rank
};

// The NCCL library's version, e.g. "2.28.3".
std::string nccl_version();

}  // namespace tessera::ops::cuda
