// The one-shot collectives (kernels/comm/peer.h, issue 17) as a CommGroup: ranks that are threads of
// this process, each on a GPU that can write every other rank's GPU memory (NVLink or PCIe
// peer-to-peer), or several sharing one GPU. Each rank's GPU holds, twice, a slot of
// `capacity_bytes` for every rank, which that rank writes its inputs into (2 x 8 x 4 MiB = 64 MiB a
// GPU at 8 ranks), and its flags; a collective is one kernel on the rank's stream, with no host
// step, so it can be recorded in a decode-step graph. Messages larger than the capacity are
// refused: SizeRoutedGroup (comm/size_routed.h) sends them to NCCL. No CUDA headers here.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/comm/communicator.h"

namespace tessera::ops::cuda {

class PeerGroup final : public CommGroup {
 public:
  static constexpr int kMaxRanks = 8;  // kPeerMaxRanks (kernels/comm/peer.h)
  static constexpr uint64_t kDefaultCapacityBytes = 4ull << 20;
  static constexpr std::chrono::seconds kDefaultTimeout{60};

  // Rank r on CUDA device devices[r] (at most kMaxRanks); throws core::Error naming two devices
  // that cannot reach each other's memory, or CUDA's error. `capacity_bytes`: a rank's slot. `timeout`: how long a
  // rank's kernel waits for the others before it gives up and the group reports it.
  explicit PeerGroup(std::vector<int> devices, uint64_t capacity_bytes = kDefaultCapacityBytes,
                     std::chrono::nanoseconds timeout = kDefaultTimeout);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int size() const override { return static_cast<int>(devices_.size()); }
  // The communicator of `rank`, for the thread that drives that rank's backend on devices[rank].
  std::unique_ptr<Communicator> communicator(int rank) override;
  // Kernels waiting in a collective stop waiting (they read the flag from host memory), and later
  // collectives throw naming `why`.
  void abort(const std::string& why) override;
  // The largest message of a collective: an all-reduce's or reduce-scatter's input, an all-gather's
  // output, in bytes.
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  // Throws core::Error when the group was aborted or a kernel stopped waiting (which names the cause:
  // a rank that stopped calling the collectives).
  void check_open() const;

  // Empty when every pair of `devices` can reach each other's memory (the same device can), else
  // which pair cannot.
  static std::string unreachable(const std::vector<int>& devices);

 private:
  struct Rank;
  std::vector<int> devices_;
  uint64_t capacity_bytes_;
  std::chrono::nanoseconds timeout_;
  std::vector<Rank> ranks_;
  int* host_words_ = nullptr;  // mapped host memory: [0] abort flag, [1] kernels' status
  mutable std::mutex mutex_;
  bool aborted_ = false;
  std::string why_;
};

}  // namespace tessera::ops::cuda
