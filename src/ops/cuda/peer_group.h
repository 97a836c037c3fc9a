// The one-shot collectives (kernels/comm/peer.h, issue 17) as a CommGroup: ranks that are threads of
// this process, each on a GPU that can write every other rank's GPU memory (NVLink or PCIe
// peer-to-peer), or several sharing one GPU. Each rank's GPU holds, twice, a slot of
// `capacity_bytes` for every rank, which that rank writes its inputs into (2 x 8 x 4 MiB = 64 MiB a
// GPU at 8 ranks), and its flags; a collective is one kernel on the rank's stream, with no host
// step, so it can be recorded in a decode-step graph. Messages larger than the capacity are
// refused: SizeRoutedGroup (comm/size_routed.h) sends them to NCCL. No CUDA headers here.
//
// Every rank needs a stream of its own: a rank's kernel waits, on the GPU, for the others' kernels.
// The CUDA backend issues all of a device's work on one stream (context.cpp), so the backends of
// ranks that share a GPU would queue their kernels behind each other's waits; their communicators
// (which run on the backend's stream) are for ranks on a GPU each. Ranks sharing a GPU (the tests)
// call the collectives below with streams of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/comm/collective_choice.h"
#include "ops/comm/communicator.h"

namespace tessera::ops::cuda {

struct PeerArgs;  // kernels/comm/peer.h

class PeerGroup final : public CommGroup {
 public:
  static constexpr int kMaxRanks = 8;  // kPeerMaxRanks (kernels/comm/peer.h)
  static constexpr uint64_t kDefaultCapacityBytes = kOneShotSlotBytes;
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

  // The collectives of `rank` on `stream` (a cudaStream_t on devices[rank]), fp32 device pointers;
  // what the communicators call with their backend's stream. Throw core::Error for a message over
  // the capacity (naming its bytes) or a group that is no longer open.
  // x [n] (in place) = the sum over the ranks, in rank order.
  void all_reduce_sum(int rank, float* x, int64_t n, void* stream) const;
  // out [rows, total] = the ranks' parts [rows, count_q] side by side (ops::balanced_cols).
  void all_gather_cols(int rank, const float* part, int64_t rows, int64_t total, float* out, void* stream) const;
  // out [rows, count_rank] = the sum over the ranks of their x [rows, total]'s columns of `rank`.
  void reduce_scatter_cols(int rank, const float* x, int64_t rows, int64_t total, float* out, void* stream) const;

  // Empty when every pair of `devices` can reach each other's memory (the same device can), else
  // which pair cannot.
  static std::string unreachable(const std::vector<int>& devices);

 private:
  struct Rank;
  void admit(int rank, uint64_t bytes, const char* what) const;
  std::vector<int> devices_;
  uint64_t capacity_bytes_;
  std::chrono::nanoseconds timeout_;
  std::vector<Rank> ranks_;
  int* host_words_ = nullptr;   // mapped host memory: [0] abort flag, [1] kernels' status
  std::vector<PeerArgs> args_;  // each rank's kernel arguments
  mutable std::mutex mutex_;
  bool aborted_ = false;
  std::string why_;
};

}  // namespace tessera::ops::cuda
