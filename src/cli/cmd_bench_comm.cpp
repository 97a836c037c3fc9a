// tessera bench comm: an all-reduce's latency and bus bandwidth per message size, for each way this
// build and machine can join tensor-parallel ranks on --device (ops::rank_group_kinds): the
// in-process group (CPU threads, or ranks sharing one GPU through host copies); with a GPU a rank,
// NCCL, the one-shot kernels over peer memory, and "auto", the two routed by the size measured at
// its start (what serve runs; its choice is printed under its rows). Each size is checked, then
// timed on rank 0 (ops::time_all_reduce): the best of three runs of `iterations` all-reduces.
// Bus bandwidth = bytes / time x 2 (ranks - 1) / ranks, NCCL's convention (nccl-tests).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/format.h"
#include "engine/memory_plan.h"
#include "ops/backend.h"
#include "ops/comm/collective_choice.h"
#include "ops/comm/size_routed.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/peer_group.h"
#endif

namespace tessera::cli {
namespace {

struct BenchCommArgs {
  std::string device = "cpu";
  int ranks = 0;  // 0: 8 on the CPU, one per GPU on cuda
  std::vector<std::string> sizes{"4KiB", "28KiB", "64KiB", "256KiB", "1MiB", "4MiB"};
  int iterations = 50;
};

int run(const BenchCommArgs& a) {
  TESSERA_CHECK(a.iterations >= 1, "--iterations {}: at least one", a.iterations);
  int ranks = a.ranks;
  if (ranks == 0) {
    ranks = 8;
#ifdef TESSERA_HAVE_CUDA
    if (a.device != "cpu") ranks = std::max(1, ops::cuda::cuda_device_count());
#endif
  }
  std::vector<uint64_t> sizes;
  for (const auto& s : a.sizes) sizes.push_back(engine::parse_bytes(s, "--sizes"));
  const auto kinds = ops::rank_group_kinds(a.device, ranks);
  fmt::print("bench comm: all-reduce of fp32 values, {} ranks on --device {}, {} calls a measurement\n", ranks,
             a.device, a.iterations);
  fmt::print("{:<12} {:>10} {:>12} {:>12} {:>12}\n", "algorithm", "size", "time us", "algbw GB/s", "busbw GB/s");
  for (const auto& kind : kinds) {
    if (!kind.problem.empty()) {
      fmt::print("{:<12} not run: {}\n", kind.name, kind.problem);
      continue;
    }
    auto group = kind.make();
    // The one-shot kernels refuse messages over their buffers: those sizes are not run.
    std::vector<uint64_t> fits = sizes;
#ifdef TESSERA_HAVE_CUDA
    if (kind.name == "one-shot")
      std::erase_if(fits, [](uint64_t b) { return b > ops::cuda::PeerGroup::kDefaultCapacityBytes; });
#endif
    const std::vector<double> seconds = ops::time_all_reduce(
        *group, [&kind](int r) { return ops::make_backend(kind.device_of(r), "", /*enforce_eager=*/true); }, fits,
        a.iterations);
    for (size_t s = 0; s < fits.size(); ++s) {
      const double algbw = static_cast<double>(fits[s]) / seconds[s] / 1e9;
      const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
      fmt::print("{:<12} {:>10} {:>12.1f} {:>12.2f} {:>12.2f}\n", kind.name, core::size_name(fits[s]), seconds[s] * 1e6,
                 algbw, busbw);
    }
    if (fits.size() < sizes.size()) fmt::print("{:<12} (larger sizes: over its buffers)\n", "");
    fmt::print("{:<12} ({})\n", "", kind.where);
    if (const auto* routed = dynamic_cast<const ops::SizeRoutedGroup*>(group.get()))
      for (const auto& line : ops::describe(routed->choice())) fmt::print("{:<12} {}\n", "", line);
  }
  return 0;
}

CommandRegistration reg{
    {"comm",
     "all-reduce latency and bus bandwidth per message size for each way to join "
     "tensor-parallel ranks (in-process, NCCL)",
     [](CLI::App& app) {
       auto a = std::make_shared<BenchCommArgs>();
       app.add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
       app.add_option("--ranks", a->ranks,
                      "ranks (threads of this process); default 8 on the CPU, one per GPU "
                      "on cuda")
           ->check(CLI::NonNegativeNumber);
       app.add_option("--sizes", a->sizes, "message sizes, each rank's (4KiB, 1MiB, ...)")
           ->delimiter(',')
           ->capture_default_str();
       app.add_option("--iterations", a->iterations, "all-reduces a measurement")->capture_default_str();
       return [a] { return run(*a); };
     },
     "bench"}};

}  // namespace
}  // namespace tessera::cli
