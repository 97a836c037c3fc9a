// tessera bench comm: an all-reduce's latency and bus bandwidth per message size, for each way this
// build and machine can join tensor-parallel ranks on --device (ops::rank_group_kinds): the
// in-process group (CPU threads, or ranks sharing one GPU through host copies) and NCCL with a GPU
// a rank. Each size is checked first (every rank must get the sum of the ranks' values), then
// timed on rank 0: `iterations` all-reduces back to back and one copy of the result to the host,
// less the time of that copy alone, divided by `iterations`; the best of three such runs.
// Bus bandwidth = bytes / time x 2 (ranks - 1) / ranks, NCCL's convention (nccl-tests).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "ops/backend.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tessera::cli {
namespace {

struct BenchCommArgs {
  std::string device = "cpu";
  int ranks = 0;  // 0: 8 on the CPU, one per GPU on cuda
  std::vector<std::string> sizes{"4KiB", "28KiB", "64KiB", "256KiB", "1MiB", "4MiB"};
  int iterations = 50;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct SizeResult {
  uint64_t bytes = 0;
  double seconds = 0;  // one all-reduce
};

// Runs every size on `kind`'s group: one thread a rank. Returns rank 0's times; throws the first
// rank's error (the group is aborted so that no rank waits on the host for a failed one) or the
// first wrong sum.
std::vector<SizeResult> run_kind(const ops::RankGroupKind& kind, int ranks, const std::vector<uint64_t>& sizes,
                                 int iterations) {
  auto group = kind.make();
  std::vector<SizeResult> results(sizes.size());
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::string> wrong(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto o = ops::make_backend(kind.device_of(r), "", /*enforce_eager=*/true);
        auto comm = group->communicator(r);
        for (size_t s = 0; s < sizes.size(); ++s) {
          const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(sizes[s] / 4));
          // Checked: rank q gives q + 1 everywhere, so every value must become ranks (ranks + 1) / 2.
          std::vector<float> mine(static_cast<size_t>(n), static_cast<float>(r + 1));
          core::Tensor x = o->from_host_f32({n}, mine.data());
          comm->all_reduce_sum(*o, x);
          // A wrong value is reported after the run, not thrown here: the other ranks would wait in
          // their next collective for this one.
          const std::vector<float> got = o->to_host_f32(x);
          const float want = static_cast<float>(ranks) * static_cast<float>(ranks + 1) / 2;
          for (size_t i = 0; i < got.size() && wrong[static_cast<size_t>(r)].empty(); ++i)
            if (got[i] != want)
              wrong[static_cast<size_t>(r)] = fmt::format(
                  "bench comm: {} all-reduce of {} bytes: rank {} got {} at "
                  "[{}], want {}",
                  kind.name, sizes[s], r, got[i], i, want);
          // Timed on zeros (the values do not change the work).
          std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
          core::Tensor z = o->from_host_f32({n}, zeros.data());
          for (int w = 0; w < 3; ++w) comm->all_reduce_sum(*o, z);
          double best = 1e30;
          for (int repeat = 0; repeat < 3; ++repeat) {
            (void)o->to_host_f32(z);  // the queue is empty before the clock starts
            const auto t0 = Clock::now();
            for (int i = 0; i < iterations; ++i) comm->all_reduce_sum(*o, z);
            (void)o->to_host_f32(z);
            const double all = seconds_since(t0);
            const auto t1 = Clock::now();
            (void)o->to_host_f32(z);
            const double copy = seconds_since(t1);
            best = std::min(best, std::max(0.0, all - copy) / iterations);
          }
          if (r == 0) results[s] = {sizes[s], best};
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        group->abort(fmt::format("rank {} failed: {}", r, e.what()));
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& w : wrong)
    if (!w.empty()) core::fail("{}", w);
  return results;
}

std::string size_name(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

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
    for (const SizeResult& r : run_kind(kind, ranks, sizes, a.iterations)) {
      const double algbw = static_cast<double>(r.bytes) / r.seconds / 1e9;
      const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
      fmt::print("{:<12} {:>10} {:>12.1f} {:>12.2f} {:>12.2f}\n", kind.name, size_name(r.bytes), r.seconds * 1e6, algbw,
                 busbw);
    }
    fmt::print("{:<12} ({})\n", "", kind.where);
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
