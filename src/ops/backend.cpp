#include "ops/backend.h"

#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "ops/comm/in_process.h"
#include "ops/comm/size_routed.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/peer_group.h"
#endif
#ifdef TESSERA_HAVE_NCCL
#include "ops/cuda/nccl.h"
#endif

namespace tessera::ops {

namespace {

// The device index of "cuda" or "cuda:N"; throws naming the flag for anything else.
int cuda_index(const std::string& device) {
  int index = 0;
  if (device.size() > 5) {
    const char* begin = device.data() + 5;
    const auto [end, ec] = std::from_chars(begin, device.data() + device.size(), index);
    if (ec != std::errc() || end != device.data() + device.size() || index < 0)
      core::fail("--device '{}': expected cuda or cuda:N with N a device index", device);
  }
  return index;
}

bool names_cuda(const std::string& device) { return device == "cuda" || device.rfind("cuda:", 0) == 0; }

}  // namespace

std::unique_ptr<Ops> make_backend(const std::string& device, const std::string& kernels, bool enforce_eager) {
  if (device == "cpu") {
    if (!kernels.empty())
      core::fail("--kernels '{}': kernel choices apply to --device cuda; the cpu backend has one kernel per op",
                 kernels);
    return std::make_unique<cpu::CpuOps>();
  }
  if (names_cuda(device)) {
    const int index = cuda_index(device);
#ifdef TESSERA_HAVE_CUDA
    auto ops = cuda::make_cuda_ops(kernels, !enforce_eager, index);
    spdlog::info("backend: cuda:{} on {}", index, cuda::device_description(index));
    return ops;
#else
    (void)enforce_eager;
    (void)index;  // parsed, so that a malformed cuda:N is named before the build is
    core::fail(
        "--device {}: this build of tessera has no CUDA backend (nvcc was not found at configure time, "
        "or TESSERA_CUDA=OFF); rebuild with the 'release' preset on a machine with the CUDA toolkit",
        device);
#endif
  }
  core::fail("--device '{}': expected cpu, cuda or cuda:N", device);
}

void bind_to_this_thread(Ops& ops) {
#ifdef TESSERA_HAVE_CUDA
  if (ops.name() == "cuda") cuda::make_current(ops);
#else
  (void)ops;
#endif
}

namespace {

[[maybe_unused]] std::vector<int> first_gpus(int size) {
  std::vector<int> devices(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) devices[static_cast<size_t>(r)] = r;
  return devices;
}

// Why `size` ranks cannot run a GPU each on this build and machine; empty when they can.
std::string gpu_each_problem(int size) {
#ifdef TESSERA_HAVE_CUDA
  const int gpus = cuda::cuda_device_count();
  if (size > gpus) return fmt::format("{} ranks need {} GPUs, this machine has {}", size, size, gpus);
  return "";
#else
  (void)size;
  return "this build has no CUDA backend";
#endif
}

}  // namespace

std::vector<RankGroupKind> rank_group_kinds(const std::string& device, int size) {
  TESSERA_CHECK(size >= 1, "--ranks {}: at least one rank", size);
  auto in_process = [size] { return std::unique_ptr<CommGroup>(std::make_unique<InProcessGroup>(size)); };
  if (device == "cpu")
    return {{"in-process", "cpu threads, sums in host memory", "", in_process, [](int) { return std::string("cpu"); }}};
  TESSERA_CHECK(names_cuda(device), "--device '{}': expected cpu, cuda or cuda:N", device);
  const int index = cuda_index(device);
  const std::string gpus = fmt::format("GPUs 0-{}, one a rank", size - 1);
  auto gpu_each = [](int r) { return fmt::format("cuda:{}", r); };
  std::vector<RankGroupKind> kinds;
  RankGroupKind nccl{"nccl", gpus, gpu_each_problem(size), nullptr, gpu_each};
  RankGroupKind one_shot{"one-shot", gpus + ", peer memory", nccl.problem, nullptr, gpu_each};
  RankGroupKind routed{"auto", gpus + ", one-shot up to the size measured faster, NCCL above", nccl.problem, nullptr,
                       gpu_each};
#ifdef TESSERA_HAVE_CUDA
  if (one_shot.problem.empty()) one_shot.problem = cuda::PeerGroup::unreachable(first_gpus(size));
  if (one_shot.problem.empty() && size > cuda::PeerGroup::kMaxRanks)
    one_shot.problem = fmt::format("{} ranks: the one-shot kernels join at most {}", size, cuda::PeerGroup::kMaxRanks);
  if (one_shot.problem.empty())
    one_shot.make = [size] { return std::unique_ptr<CommGroup>(std::make_unique<cuda::PeerGroup>(first_gpus(size))); };
#endif
#if defined(TESSERA_HAVE_CUDA) && defined(TESSERA_HAVE_NCCL)
  if (nccl.problem.empty())
    nccl.make = [size] { return std::unique_ptr<CommGroup>(std::make_unique<cuda::NcclGroup>(first_gpus(size))); };
  if (routed.problem.empty()) routed.make = [size] { return gpu_rank_group(size, choose_collectives(size)); };
#else
  const std::string no_nccl = "this build has no NCCL (configure with TESSERA_NCCL_ROOT where nccl.h and libnccl are)";
  if (nccl.problem.empty()) nccl.problem = no_nccl;
  if (routed.problem.empty()) routed.problem = no_nccl;
#endif
  kinds.push_back(std::move(nccl));
  kinds.push_back(std::move(one_shot));
  kinds.push_back(std::move(routed));
  kinds.push_back({"in-process", fmt::format("ranks sharing cuda:{}, sums through host copies", index), "", in_process,
                   [index](int) { return fmt::format("cuda:{}", index); }});
  return kinds;
}

namespace {

// The choice's device memory a GPU when it was not measured (collectives_device_bytes).
CollectiveChoice with_estimate(CollectiveChoice c, int size) {
  c.device_bytes = collectives_device_bytes(c, size);
  c.device_bytes_source = "estimated: NCCL's buffers, not measured, and the one-shot slots";
  return c;
}

}  // namespace

CollectiveChoice choose_collectives(int size) {
  CollectiveChoice c;
  const std::string mode = core::env_value("TESSERA_ALL_REDUCE").value_or("auto");
  TESSERA_CHECK(mode == "auto" || mode == "nccl" || mode == "one-shot",
                "TESSERA_ALL_REDUCE={}: expected auto, nccl or one-shot", mode);
  if (mode == "nccl") {
    c.source = "TESSERA_ALL_REDUCE=nccl";
    return with_estimate(c, size);
  }
  const RankGroupKind one_shot = rank_group_kind("cuda:0", size, "one-shot");
  if (!one_shot.problem.empty()) {
    TESSERA_CHECK(mode != "one-shot", "TESSERA_ALL_REDUCE=one-shot: {}", one_shot.problem);
    c.source = one_shot.problem;
    return with_estimate(c, size);
  }
#ifdef TESSERA_HAVE_CUDA
  if (mode == "one-shot") {
    c.one_shot_max_bytes = cuda::PeerGroup::kDefaultCapacityBytes;
    c.source = "TESSERA_ALL_REDUCE=one-shot";
    return with_estimate(c, size);
  }
  const RankGroupKind nccl = rank_group_kind("cuda:0", size, "nccl");
  TESSERA_CHECK(nccl.problem.empty(), "--tensor-parallel-size {}: {}", size, nccl.problem);
  // What the groups take is GPU 0's free memory before they are made less after they have run
  // (NCCL connects its channels at the first collective); the timing backends are gone by then and
  // the pool's cache is given back before each reading. The plan's CUDA context on GPU 0 was made
  // before, so it is not counted twice.
  const uint64_t free_before = cuda::free_device_bytes_uncached(0);
  // A short wait: a one-shot kernel that cannot reach its peers (peer-to-peer broken below CUDA)
  // gives up in seconds and the choice falls back to NCCL.
  auto peers = std::make_unique<cuda::PeerGroup>(first_gpus(size), cuda::PeerGroup::kDefaultCapacityBytes,
                                                 std::chrono::seconds(10));
  auto ring = nccl.make();
  c = measure_choice(*peers, cuda::PeerGroup::kDefaultCapacityBytes, *ring,
                     [](int r) { return make_backend(fmt::format("cuda:{}", r), "", /*enforce_eager=*/true); });
  const uint64_t free_after = cuda::free_device_bytes_uncached(0);
  uint64_t taken = free_before > free_after ? free_before - free_after : 0;
  // The ranks make the one-shot group only where the choice sends messages to it.
  const uint64_t slots = one_shot_slots_bytes(size);
  if (c.one_shot_max_bytes == 0) taken = taken > slots ? taken - slots : 0;
  c.device_bytes = taken;
  c.device_bytes_source = "measured on GPU 0 at start-up, both groups made and run";
  return c;
#else
  core::fail("--tensor-parallel-size {} on GPUs: this build has no CUDA backend", size);
#endif
}

std::unique_ptr<CommGroup> gpu_rank_group(int size, const CollectiveChoice& choice) {
  const RankGroupKind nccl = rank_group_kind("cuda:0", size, "nccl");
  TESSERA_CHECK(nccl.problem.empty(), "--tensor-parallel-size {}: {}", size, nccl.problem);
  std::unique_ptr<CommGroup> small;
  if (choice.one_shot_max_bytes > 0) {
    const RankGroupKind one_shot = rank_group_kind("cuda:0", size, "one-shot");
    TESSERA_CHECK(one_shot.problem.empty(), "--tensor-parallel-size {}: one-shot collectives: {}", size,
                  one_shot.problem);
    small = one_shot.make();
  }
  return std::make_unique<SizeRoutedGroup>(std::move(small), nccl.make(), choice);
}

RankGroupKind rank_group_kind(const std::string& device, int size, const std::string& name) {
  for (RankGroupKind& kind : rank_group_kinds(device, size))
    if (kind.name == name) return std::move(kind);
  core::fail("--device {}: no '{}' ranks on this device", device, name);
}

}  // namespace tessera::ops
