#include "ops/comm/collective_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/format.h"

namespace tessera::ops {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string micros(double seconds) { return seconds < 0 ? "-" : fmt::format("{:.1f} us", seconds * 1e6); }

}  // namespace

uint64_t one_shot_limit(const std::vector<AllReduceTimes>& times) {
  uint64_t limit = 0;
  for (const AllReduceTimes& t : times) {
    if (t.one_shot < 0 || (t.nccl >= 0 && t.one_shot >= t.nccl)) break;
    limit = t.bytes;
  }
  return limit;
}

double all_reduce_seconds(double run_seconds, double copy_seconds, int iterations) {
  const double calls = run_seconds - copy_seconds;
  return (calls > 0 ? calls : run_seconds) / iterations;
}

std::vector<std::string> describe(const CollectiveChoice& c) {
  std::vector<std::string> lines;
  lines.push_back(c.one_shot_max_bytes == 0 ? fmt::format("NCCL for every message ({})", c.source)
                                            : fmt::format("one-shot over peer memory up to {}, NCCL above ({})",
                                                          core::size_name(c.one_shot_max_bytes), c.source));
  for (const AllReduceTimes& t : c.measured)
    lines.push_back(fmt::format("all-reduce {:>8}: one-shot {:>9}, NCCL {:>9}", core::size_name(t.bytes),
                                micros(t.one_shot), micros(t.nccl)));
  if (c.device_bytes > 0)
    lines.push_back(
        fmt::format("device memory {} a GPU ({})", core::human_bytes(c.device_bytes), c.device_bytes_source));
  return lines;
}

uint64_t collectives_device_bytes(const CollectiveChoice& choice, int ranks) {
  const uint64_t one_shot = choice.one_shot_max_bytes > 0 ? one_shot_slots_bytes(ranks) : 0;
  return kNcclDeviceBytesEstimate + one_shot;
}

std::vector<double> time_all_reduce(CommGroup& group, const RankBackend& backend, const std::vector<uint64_t>& sizes,
                                    int iterations, std::chrono::milliseconds deadline, const std::string& why_late) {
  const int ranks = group.size();
  // The watchdog: aborts the group if the ranks are not done by the deadline.
  std::mutex mu;
  std::condition_variable cv;
  int running = ranks;
  auto finished = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (--running == 0) cv.notify_all();
  };
  std::thread watchdog;
  if (deadline.count() > 0)
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, deadline, [&] { return running == 0; }))
        group.abort(fmt::format("{} (still running after {} s)", why_late, deadline.count() / 1000.0));
    });
  std::vector<double> results(sizes.size(), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::string> wrong(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto o = backend(r);
        auto comm = group.communicator(r);
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
              wrong[static_cast<size_t>(r)] =
                  fmt::format("all-reduce of {} bytes: rank {} got {} at [{}], want {}", sizes[s], r, got[i], i, want);
          // Timed on zeros (the values do not change the work).
          std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
          core::Tensor z = o->from_host_f32({n}, zeros.data());
          for (int w = 0; w < 3; ++w) comm->all_reduce_sum(*o, z);
          // The best of three of the run and of the copy alone, each on its own: one repeat whose
          // copy a preemption slowed must not make the difference (and so the time) zero.
          double best_all = 1e30, best_copy = 1e30;
          for (int repeat = 0; repeat < 3; ++repeat) {
            (void)o->to_host_f32(z);  // the queue is empty before the clock starts
            const auto t0 = Clock::now();
            for (int i = 0; i < iterations; ++i) comm->all_reduce_sum(*o, z);
            (void)o->to_host_f32(z);
            best_all = std::min(best_all, seconds_since(t0));
            const auto t1 = Clock::now();
            (void)o->to_host_f32(z);
            best_copy = std::min(best_copy, seconds_since(t1));
          }
          if (r == 0) results[s] = all_reduce_seconds(best_all, best_copy, iterations);
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        group.abort(fmt::format("rank {} failed: {}", r, e.what()));
      }
      finished();
    });
  for (auto& t : threads) t.join();
  if (watchdog.joinable()) watchdog.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& w : wrong)
    if (!w.empty()) core::fail("{}", w);
  return results;
}

CollectiveChoice measure_choice(CommGroup& one_shot, uint64_t one_shot_capacity, CommGroup& nccl,
                                const RankBackend& backend) {
  std::vector<uint64_t> sizes;
  for (uint64_t b = 4096; b <= one_shot_capacity; b *= 4) sizes.push_back(b);
  TESSERA_CHECK(!sizes.empty(), "one-shot buffers of {} bytes: too small to measure", one_shot_capacity);
  constexpr int kIterations = 20;
  std::vector<double> peer(sizes.size(), -1.0);
  std::string failed;
  try {
    peer = time_all_reduce(one_shot, backend, sizes, kIterations);
  } catch (const core::Error& e) {
    failed = e.what();
  }
  const std::vector<double> ring =
      time_all_reduce(nccl, backend, sizes, kIterations, std::chrono::seconds(60),
                      "NCCL's all-reduce did not finish at start-up: the GPUs' peer-to-peer path may be broken below "
                      "CUDA (PCIe ACS or the IOMMU; NCCL_P2P_DISABLE=1 makes NCCL go through host memory)");
  CollectiveChoice c;
  c.source = failed.empty() ? "measured at start-up" : "the one-shot collectives failed at start-up: " + failed;
  for (size_t s = 0; s < sizes.size(); ++s) c.measured.push_back({sizes[s], peer[s], ring[s]});
  c.one_shot_max_bytes = one_shot_limit(c.measured);
  return c;
}

}  // namespace tessera::ops
