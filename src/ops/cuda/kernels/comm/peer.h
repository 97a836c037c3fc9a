// One-shot collectives over peer memory (issue 17): every rank writes its input straight into a slot
// of its own in every rank's buffer (NVLink or PCIe peer-to-peer, or the same GPU), meets the others
// at a barrier of flags in their memory, and then reads only its own GPU's memory: every rank's
// input is there. One kernel a collective and no host involvement, so it can be recorded in a
// decode-step graph; for small messages it beats NCCL's ring and tree, whose steps each cost a
// latency. Writes cross the link, never reads: a peer-to-peer read over PCIe is a round trip the
// root complex may serve slowly or not at all ("one-shot pull kernels never complete over PCIe
// P2P", reference/pain_points.md A10), while writes are posted.
//
// A rank's buffer: two halves, each a slot of half_floats per rank. Protocol (per block b of a grid
// fixed for the group, so that block b of every rank covers the same elements):
// - call k of block b: flag = k (its own counter, in its own signals), half = k % 2;
// - push: block b writes its grid-stride share of the input into slot `rank` of half k % 2 of every
//   rank's buffer (a reduce-scatter only the elements in the receiving rank's columns);
// - barrier: thread q of block b stores flag k into rank q's arrived[b][this rank] (release, system
//   scope: after the block's writes), then waits until its own arrived[b][q] >= k (acquire);
// - read: block b reads the same share of every slot of its own half k % 2, sums in rank order (the
//   same bits on every rank), and writes its output.
// Two halves suffice: a rank at call k + 1 writes the other half while the others may still read call
// k's, and it cannot reach call k + 2 before every rank arrived at k + 1, i.e. finished reading k.
// A rank that waits longer than the timeout, or sees the group's abort flag, stops waiting, records
// why in the group's status word (host memory) and leaves its output unwritten; the host side reads
// the status at its next call and throws.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

constexpr int kPeerMaxRanks = 8;
// The grid of every one-shot kernel: PeerArgs::blocks (at most kPeerBlocks) of 512 threads, the
// same for every call of a group. 32 blocks on a GPU a rank read a few MB of peers' buffers at link
// speed; ranks that share one GPU take 4 each, so that their waiting blocks hold few SMs while the
// rank they wait for still needs the others for its own kernels.
constexpr int kPeerBlocks = 32;
constexpr int kPeerThreads = 512;

// Status words the kernels leave in host memory when they stop waiting.
constexpr int kPeerStatusTimedOut = 1;
constexpr int kPeerStatusAborted = 2;

// One rank's flags, in its device memory, zeroed at creation.
struct PeerSignals {
  uint32_t arrived[kPeerBlocks][kPeerMaxRanks];  // [b][q]: rank q's last call of block b to arrive here
  uint32_t calls[kPeerBlocks];                   // this rank's calls of block b so far
};

// What a rank's kernels need to reach every rank: fixed for the life of its communicator.
struct PeerArgs {
  float* buffers[kPeerMaxRanks];  // rank q's buffer: two halves of `size` slots of half_floats
  PeerSignals* signals[kPeerMaxRanks];
  int64_t half_floats;
  const volatile int* abort_flag;  // host memory, mapped: non-zero once the group is aborted
  int* status;                     // host memory, mapped: kPeerStatus* once a kernel stopped waiting
  uint64_t timeout_ns;
  int rank, size;
  int blocks;
};
inline void add_fields(Signature& s, const PeerArgs& a) {
  static_assert(sizeof(PeerArgs) == 176, "a field was added: add it to the signature");
  for (int q = 0; q < kPeerMaxRanks; ++q) {
    s.add(static_cast<const void*>(a.buffers[q]));
    s.add(static_cast<const void*>(a.signals[q]));
  }
  s.add(a.half_floats);
  s.add(const_cast<const int*>(a.abort_flag));
  s.add(static_cast<const void*>(a.status));
  s.add(a.timeout_ns);
  s.add(a.rank);
  s.add(a.size);
  s.add(a.blocks);
}

// x [n] (in place) = the sum over the ranks of their x, in rank order. n <= half_floats (a slot).
void launch_peer_all_reduce(const PeerArgs& a, float* x, int64_t n, cudaStream_t s);
// out [rows, total] = the ranks' parts [rows, count_q] side by side, rank q's at column first_q of
// the balanced split (ops::balanced_cols). rows x count_rank <= half_floats.
void launch_peer_all_gather_cols(const PeerArgs& a, const float* part, int64_t rows, int64_t total, float* out,
                                 cudaStream_t s);
// out [rows, count_rank] = the sum over the ranks of the columns of their x [rows, total] that the
// balanced split gives this rank. rows x total <= half_floats.
void launch_peer_reduce_scatter_cols(const PeerArgs& a, const float* x, int64_t rows, int64_t total, float* out,
                                     cudaStream_t s);
// Loads the kernels on the calling thread's current device now: CUDA loads modules lazily, at a
// kernel's first launch, and a load may wait for the device while another rank's kernel on the
// same GPU spins waiting for this one.
void preload_peer_kernels();

}  // namespace tessera::ops::cuda
