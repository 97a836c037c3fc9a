// A Communicator for ranks that are threads of one process: CPU ranks (the reference), and ranks
// that share one GPU (the tests of sharded CUDA kernels without several GPUs). Ranks meet at a
// barrier and read each other's buffers directly (device buffers through a host copy, so it is
// slow and cannot be inside a recorded CUDA graph); sums run in rank order on every rank, so all
// ranks get identical bits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/comm/communicator.h"

namespace tessera::ops {

class InProcessGroup final : public CommGroup {
 public:
  explicit InProcessGroup(int size);
  int size() const override { return size_; }
  // The communicator of `rank`, to be used by one thread at a time.
  std::unique_ptr<Communicator> communicator(int rank) override;
  // Ends every current and later collective with an error naming `why`: a rank that failed calls it,
  // so that the others do not wait for it forever.
  void abort(const std::string& why) override;

 private:
  friend class InProcessCommunicator;
  // Waits until all ranks have arrived; throws core::Error once the group is aborted.
  void arrive_and_wait();

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string why_;
  // Each rank's buffer of the collective under way and its values in host memory (written before
  // the first barrier of a collective, read between its barriers).
  struct Slot {
    const core::Tensor* tensor = nullptr;
    const float* data = nullptr;
  };
  std::vector<Slot> slots_;
};

}  // namespace tessera::ops
