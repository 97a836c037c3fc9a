// NCCL communicators for tensor-parallel ranks on separate GPUs of one process (issue 17, DESIGN.md
// "Many GPUs"): the production path of ops::Communicator. One rank per GPU, created together by
// ncclCommInitAll; each rank's collectives run on its backend's stream, so they are ordered with
// its kernels and can be captured into its decode-step graphs. NCCL's own tuning picks the
// algorithm; no environment variable is needed. (Ranks as processes on several hosts would use
// ncclCommInitRank with a bootstrap id instead: the calls below stay the same.)
// Built only where NCCL was found (TESSERA_HAVE_NCCL); this header needs no NCCL or CUDA headers.
#pragma once

#include <memory>
#include <mutex>
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
  // A rank failed: every rank's communicator is aborted (ncclCommAbort), which ends the collectives
  // the other ranks' GPUs wait in, and later collectives throw naming `why`. The group is done.
  void abort(const std::string& why) override;
  // Throws naming why the group was aborted, if it was.
  void check_open() const;

 private:
  std::vector<int> devices_;
  std::vector<void*> comms_;  // ncclComm_t, one per rank
  mutable std::mutex mutex_;
  bool aborted_ = false;
  std::string why_;
};

// The NCCL library's version, e.g. "2.28.3".
std::string nccl_version();

}  // namespace tessera::ops::cuda
