#include "ops/backend.h"

#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <charconv>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/comm/in_process.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
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

std::vector<RankGroupKind> rank_group_kinds(const std::string& device, int size) {
  TESSERA_CHECK(size >= 1, "--ranks {}: at least one rank", size);
  auto in_process = [size] { return std::unique_ptr<CommGroup>(std::make_unique<InProcessGroup>(size)); };
  if (device == "cpu")
    return {{"in-process", "cpu threads, sums in host memory", "", in_process, [](int) { return std::string("cpu"); }}};
  TESSERA_CHECK(names_cuda(device), "--device '{}': expected cpu, cuda or cuda:N", device);
  const int index = cuda_index(device);
  std::vector<RankGroupKind> kinds;
  RankGroupKind nccl{"nccl", fmt::format("GPUs 0-{}, one a rank", size - 1), "", nullptr,
                     [](int r) { return fmt::format("cuda:{}", r); }};
#if defined(TESSERA_HAVE_CUDA) && defined(TESSERA_HAVE_NCCL)
  const int gpus = cuda::cuda_device_count();
  if (size > gpus) {
    nccl.problem = fmt::format("{} ranks need {} GPUs, this machine has {}", size, size, gpus);
  } else {
    nccl.make = [size] {
      std::vector<int> devices(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) devices[static_cast<size_t>(r)] = r;
      return std::unique_ptr<CommGroup>(std::make_unique<cuda::NcclGroup>(devices));
    };
  }
#else
  nccl.problem = "this build has no NCCL (configure with TESSERA_NCCL_ROOT where nccl.h and libnccl are)";
#endif
  kinds.push_back(std::move(nccl));
  kinds.push_back({"in-process", fmt::format("ranks sharing cuda:{}, sums through host copies", index), "", in_process,
                   [index](int) { return fmt::format("cuda:{}", index); }});
  return kinds;
}

RankGroupKind rank_group_kind(const std::string& device, int size, const std::string& name) {
  for (RankGroupKind& kind : rank_group_kinds(device, size))
    if (kind.name == name) return std::move(kind);
  core::fail("--device {}: no '{}' ranks on this device", device, name);
}

}  // namespace tessera::ops
