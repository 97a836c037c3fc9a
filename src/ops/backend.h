// The backend a --device names. The one place that knows every backend (ops.h is the contract they
// implement; cpu/ and cuda/ implement it).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/comm/collective_choice.h"
#include "ops/comm/communicator.h"
#include "ops/ops.h"

namespace tessera::ops {

// "cpu" (the fp32 reference backend) or "cuda[:N]" (CUDA device N, default 0), with --kernels
// overrides (CUDA only) and decode steps as CUDA graphs unless `enforce_eager`; throws core::Error
// naming the flag when the device is unknown or unavailable in this build.
std::unique_ptr<Ops> make_backend(const std::string& device, const std::string& kernels = "",
                                  bool enforce_eager = false);

// Makes `ops`' device current on the calling thread, for a thread that loads or steps a
// tensor-parallel rank on a GPU of its own (the CUDA runtime's current device is per thread); a
// no-op for the CPU backend.
void bind_to_this_thread(Ops& ops);

// A way to join `size` tensor-parallel ranks (threads of this process) that this build and machine
// offer on a --device: what `tessera bench comm` times. `problem` is empty when it can run, else
// why not (e.g. NCCL with more ranks than GPUs). On GPUs: "nccl" (NCCL alone), "one-shot" (the
// peer-memory kernels alone, messages up to their buffers), "auto" (what serve runs: one-shot up to
// the size measured faster, NCCL above: gpu_rank_group), "in-process" (ranks sharing one GPU).
struct RankGroupKind {
  std::string name;   // "in-process", "nccl", "one-shot", "auto"
  std::string where;  // where the ranks compute and how they exchange
  std::string problem;
  std::function<std::unique_ptr<CommGroup>()> make;
  std::function<std::string(int rank)> device_of;  // the rank's --device
};
std::vector<RankGroupKind> rank_group_kinds(const std::string& device, int size);
// The kind `name` ("nccl", "in-process") of rank_group_kinds(device, size); throws core::Error when
// the device does not offer it.
RankGroupKind rank_group_kind(const std::string& device, int size, const std::string& name);

// Ranks on GPUs 0..size-1, a GPU each (where "nccl" has no problem): which collectives go one-shot,
// by TESSERA_ALL_REDUCE (auto: measured now, with a group of each kind made and dropped for it;
// about a second). Where the GPUs cannot reach each other's memory, or the one-shot kernels fail their check,, every
// message goes to NCCL and `source` says why.
CollectiveChoice choose_collectives(int size);
// The group serve's ranks on a GPU each use: NCCL, and the one-shot group beside it where `choice`
// sends messages to it.
std::unique_ptr<CommGroup> gpu_rank_group(int size, const CollectiveChoice& choice);

}  // namespace tessera::ops
