// Which algorithm carries a collective of a given size between ranks on a GPU each (issue 17): the
// one-shot kernels over peer memory (cuda/peer_group.h) up to a size, NCCL above it. The size is
// chosen by a short measurement when the ranks start: both algorithms' all-reduce time at a few
// sizes on this machine's links, the one-shot taken up to the largest size below which it won at
// every measured size. `tessera plan` prints the choice and the times, and the ranks run with that
// choice: no NCCL environment variable is needed for small all-reduces to be fast.
// Host-only: the timing loop runs through the Communicator interface, one thread a rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/comm/communicator.h"
#include "ops/ops.h"

namespace tessera::ops {

// One message size's all-reduce time with each algorithm, in seconds; negative where the algorithm
// did not run (a message larger than the one-shot buffers).
struct AllReduceTimes {
  uint64_t bytes = 0;
  double one_shot = -1;
  double nccl = -1;
};

struct CollectiveChoice {
  // Collectives whose message (an all-reduce's or reduce-scatter's input, an all-gather's output)
  // has at most this many bytes run one-shot; the others NCCL. 0: all NCCL.
  uint64_t one_shot_max_bytes = 0;
  // Why: "measured at start-up", "TESSERA_ALL_REDUCE=nccl", "GPU 0 cannot reach GPU 1's memory ...",
  // "the one-shot collectives failed at start-up: ...".
  std::string source;
  std::vector<AllReduceTimes> measured;
  // Device memory the ranks' collectives take on each GPU (NCCL's channel buffers, the one-shot
  // slots), which the memory plan counts beside the weights: measured when the start-up measurement
  // ran (GPU 0's free memory before the groups were made and after they ran), else estimated
  // (collectives_device_bytes); and where the number came from.
  uint64_t device_bytes = 0;
  std::string device_bytes_source;
};

// NCCL's own device memory a GPU, when it was not measured: its buffers grow with the channels it
// opens (4 MiB a channel and peer for the simple protocol, plus LL and LL128), and its maintainers'
// and users' reports put one communicator at 0.5-1.6 GiB a GPU within one host (NVIDIA/nccl #864,
// #986, #2366). 1 GiB, a middle figure; a measured number replaces it whenever the plan measures.
inline constexpr uint64_t kNcclDeviceBytesEstimate = 1ull << 30;

// A rank's slot in the one-shot buffers (cuda::PeerGroup's default capacity): the largest message
// the one-shot collectives carry. Each GPU holds two sets of a slot for every rank.
inline constexpr uint64_t kOneShotSlotBytes = 4ull << 20;

// The one-shot buffers' device memory on each GPU of a `ranks`-rank group.
constexpr uint64_t one_shot_slots_bytes(int ranks) { return 2 * static_cast<uint64_t>(ranks) * kOneShotSlotBytes; }

// The estimate for `ranks` ranks when nothing was measured: NCCL's, plus the one-shot slots when
// the choice sends any message one-shot.
uint64_t collectives_device_bytes(const CollectiveChoice& choice, int ranks);

// The largest measured size at and below which the one-shot took less time than NCCL at every
// measured size (sorted by bytes); 0 when it lost at the smallest. A single loss ends the range, so
// that a size where NCCL won never goes one-shot.
uint64_t one_shot_limit(const std::vector<AllReduceTimes>& times);

// Seconds per all-reduce from the timing loop's best run of `iterations` calls plus one copy to the
// host (`run_seconds`) and its best copy alone (`copy_seconds`): the difference over `iterations`.
// When the copy's noise is as large as the calls (tiny messages on a loaded host), the difference
// means nothing: the run over `iterations` (an upper bound) is returned instead, never zero or less.
double all_reduce_seconds(double run_seconds, double copy_seconds, int iterations);

// What plan and serve print: the rule, then one line per measured size.
std::vector<std::string> describe(const CollectiveChoice& choice);

// A backend for rank r's thread (the rank's device), for the timing loop.
using RankBackend = std::function<std::unique_ptr<Ops>(int rank)>;

// Each size's fp32 all-reduce on `group`, one thread a rank with its own backend: first checked
// (every rank must get the sum of the ranks' values), then timed on the host clock, `iterations`
// calls back to back and one copy of the result to the host, less that copy alone, divided by
// `iterations`; the best of three. Returns rank 0's seconds per all-reduce, per size. Throws a rank's
// error (aborting the group, so that no rank waits for it) or the first wrong sum. With a
// `deadline`, a run still going after it is aborted with `why_late` (a collective that hangs, e.g.
// on a peer-to-peer path broken below CUDA, then ends in an error naming it, not in a hang).
std::vector<double> time_all_reduce(CommGroup& group, const RankBackend& backend, const std::vector<uint64_t>& sizes,
                                    int iterations, std::chrono::milliseconds deadline = std::chrono::milliseconds(0),
                                    const std::string& why_late = "");

// The start-up measurement: the all-reduce at 4 KiB ... `one_shot_capacity` on both groups, and the
// choice of one_shot_limit. A one-shot group that fails (a wrong sum, a rank that timed out: peer
// memory a BIOS or IOMMU setting broke) is not an error: every message then goes to NCCL, and the
// choice's source says why. NCCL's failure is thrown.
CollectiveChoice measure_choice(CommGroup& one_shot, uint64_t one_shot_capacity, CommGroup& nccl,
                                const RankBackend& backend);

}  // namespace tessera::ops
