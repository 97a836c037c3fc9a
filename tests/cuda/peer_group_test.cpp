// The one-shot collectives over peer memory (ops/cuda/peer_group.h, kernels/comm/peer.h; issue 17)
// with ranks that share GPU 0, each on a stream of its own (the same kernels and flags as ranks on
// GPUs of their own; only the link differs): every rank's all-reduce equals the host's sum in rank order bit for bit,
// over sizes that take the float4 and the element paths and calls that alternate the buffers' halves; all-gather and
// reduce-scatter place uneven column splits; a recorded CUDA graph replays them; a rank left waiting ends by abort or
// by timeout with an error naming why; a message over the buffers is refused by size. With NCCL, the group serve builds
// (measured choice, one rank on one GPU). Skips itself without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/comm/size_routed.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/peer_group.h"
#include "support/require_gpu.h"

namespace tessera {
namespace {

// Rank r's values for call `call` of n elements: deterministic, so every rank can compute the sum.
std::vector<float> values(int rank, int call, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(rank * 7919 + call * 104729 + n));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// What a rank of these tests holds on GPU 0: its own stream (the ranks' kernels wait for each other
// on the GPU, so they cannot share the backend's one stream: peer_group.h), device buffers and a
// pinned host buffer, all made by the main thread before any rank starts, so that no allocation
// can wait for the device while a rank's kernel waits for another. Copies go through the pinned
// buffer: with copies from and to pageable memory (which the driver stages through pinned buffers
// of its own, shared by the ranks), eight ranks on an H200 waited out the 10 s and failed; through
// pinned buffers they pass in a second.
struct RankBuffers {
  cudaStream_t stream = nullptr;
  float* in = nullptr;
  float* out = nullptr;
  float* host = nullptr;  // pinned
  int64_t floats = 0;
};

class Ranks {
 public:
  Ranks(int n, int64_t floats) : ranks_(static_cast<size_t>(n)) {
    for (auto& r : ranks_) {
      EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
      EXPECT_EQ(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), cudaSuccess);
      EXPECT_EQ(cudaMalloc(&r.in, static_cast<size_t>(floats) * 4), cudaSuccess);
      EXPECT_EQ(cudaMalloc(&r.out, static_cast<size_t>(floats) * 4), cudaSuccess);
      EXPECT_EQ(cudaMallocHost(&r.host, static_cast<size_t>(floats) * 4), cudaSuccess);
      r.floats = floats;
    }
  }
  ~Ranks() {
    for (auto& r : ranks_) {
      (void)cudaStreamSynchronize(r.stream);
      (void)cudaFree(r.in);
      (void)cudaFree(r.out);
      (void)cudaFreeHost(r.host);
      (void)cudaStreamDestroy(r.stream);
    }
  }
  RankBuffers& operator[](int r) { return ranks_[static_cast<size_t>(r)]; }
  int size() const { return static_cast<int>(ranks_.size()); }

 private:
  std::vector<RankBuffers> ranks_;
};

// Both end with the rank's stream drained, so the pinned buffer is free again.
void upload(const RankBuffers& b, float* dst, const std::vector<float>& v) {
  ASSERT_LE(static_cast<int64_t>(v.size()), b.floats);
  std::copy(v.begin(), v.end(), b.host);
  (void)cudaMemcpyAsync(dst, b.host, v.size() * 4, cudaMemcpyHostToDevice, b.stream);
  (void)cudaStreamSynchronize(b.stream);
}
std::vector<float> download(const RankBuffers& b, const float* src, int64_t n) {
  if (n > b.floats) return {};
  (void)cudaMemcpyAsync(b.host, src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, b.stream);
  (void)cudaStreamSynchronize(b.stream);
  return std::vector<float>(b.host, b.host + n);
}

// Runs `body(rank, buffers, failure)` on a thread per rank; returns each rank's failures (checked
// after the threads end, so that no rank stops calling collectives the others wait in). A rank that
// throws aborts the group.
template <class Body>
std::vector<std::string> on_ranks(ops::cuda::PeerGroup& group, Ranks& ranks, Body body) {
  std::vector<std::string> failures(static_cast<size_t>(ranks.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      (void)cudaSetDevice(0);
      try {
        body(r, ranks[r], failures[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
        group.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return failures;
}

// How long a rank's kernel waits for the others in the tests whose ranks all take part: a rank that
// cannot be scheduled beside the others (ranks sharing one GPU) then fails the test in seconds,
// naming the wait, instead of holding the run for the default minute a collective.
constexpr std::chrono::seconds kTestWait{10};

void expect_no_failures(const std::vector<std::string>& failures) {
  for (size_t r = 0; r < failures.size(); ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

// The ranks' threads meet: arrive_and_wait returns true once all `n` arrived, false after `wait`
// (a rank that left early must not hold the others for ever).
class Meeting {
 public:
  explicit Meeting(int n) : left_(n) {}
  bool arrive_and_wait(std::chrono::seconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (--left_ <= 0) cv_.notify_all();
    return cv_.wait_for(lock, wait, [&] { return left_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

class PeerGroupRanks : public ::testing::TestWithParam<int> {};

TEST_P(PeerGroupRanks, CollectivesMatchTheHostsSumsBitForBit) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const int n_ranks = GetParam();
  ops::cuda::PeerGroup group(std::vector<int>(static_cast<size_t>(n_ranks), 0),
                             ops::cuda::PeerGroup::kDefaultCapacityBytes, kTestWait);
  const int64_t capacity_floats = static_cast<int64_t>(group.capacity_bytes() / 4);
  Ranks ranks(n_ranks, capacity_floats);
  // 1 and 3: the element path (n % 4 != 0); 7168: a decode token's hidden state; 7168 x 16 + 3; and
  // a slot's whole capacity. Each size twice: calls alternate the buffers' halves.
  const std::vector<int64_t> sizes = {1, 3, 7168, 7168 * 16 + 3, capacity_floats};
  const auto failures = on_ranks(group, ranks, [&](int r, RankBuffers& b, std::string& failure) {
    int call = 0;
    for (int64_t n : sizes)
      for (int twice = 0; twice < 2; ++twice, ++call) {
        upload(b, b.in, values(r, call, n));
        group.all_reduce_sum(r, b.in, n, b.stream);
        const std::vector<float> got = download(b, b.in, n);
        std::vector<float> want(static_cast<size_t>(n), 0.0f);
        for (int q = 0; q < n_ranks; ++q) {
          const std::vector<float> theirs = values(q, call, n);
          for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += theirs[static_cast<size_t>(i)];
        }
        if (got != want && failure.empty()) failure = "all-reduce of " + std::to_string(n) + " floats differs";
      }
    // All-gather of 3 rows, 7 x ranks + 1 columns (rank 0 holds one more).
    const int64_t rows = 3, total = 7 * n_ranks + 1;
    const auto [first, count] = ops::balanced_cols(total, n_ranks, r);
    (void)first;
    upload(b, b.in, values(r, 100, rows * count));
    group.all_gather_cols(r, b.in, rows, total, b.out, b.stream);
    std::vector<float> want(static_cast<size_t>(rows * total));
    for (int q = 0; q < n_ranks; ++q) {
      const auto [c0, cn] = ops::balanced_cols(total, n_ranks, q);
      const std::vector<float> theirs = values(q, 100, rows * cn);
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t c = 0; c < cn; ++c)
          want[static_cast<size_t>(t * total + c0 + c)] = theirs[static_cast<size_t>(t * cn + c)];
    }
    if (download(b, b.out, rows * total) != want && failure.empty()) failure = "all-gather differs";
    // Reduce-scatter of 2 rows, 5 x ranks + 3 columns.
    const int64_t rows2 = 2, total2 = 5 * n_ranks + 3;
    const auto [mine0, mine_count] = ops::balanced_cols(total2, n_ranks, r);
    upload(b, b.in, values(r, 200, rows2 * total2));
    group.reduce_scatter_cols(r, b.in, rows2, total2, b.out, b.stream);
    std::vector<float> want2(static_cast<size_t>(rows2 * mine_count), 0.0f);
    for (int q = 0; q < n_ranks; ++q) {
      const std::vector<float> theirs = values(q, 200, rows2 * total2);
      for (int64_t t = 0; t < rows2; ++t)
        for (int64_t c = 0; c < mine_count; ++c)
          want2[static_cast<size_t>(t * mine_count + c)] += theirs[static_cast<size_t>(t * total2 + mine0 + c)];
    }
    if (download(b, b.out, rows2 * mine_count) != want2 && failure.empty()) failure = "reduce-scatter differs";
    group.check_open();  // a kernel that gave up waiting says so, not only that its result differs
  });
  expect_no_failures(failures);
}

INSTANTIATE_TEST_SUITE_P(SharingGpu0, PeerGroupRanks, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

// Each rank records an all-reduce of its x in place into a CUDA graph and replays it three times:
// x goes (r + 1) -> S = N (N + 1) / 2 -> N S -> N^2 S, exactly (small integers).
TEST(PeerGroup, ReplaysFromARecordedGraph) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  constexpr int kRanks = 4;
  constexpr int64_t kN = 7168;
  ops::cuda::PeerGroup group(std::vector<int>(kRanks, 0), ops::cuda::PeerGroup::kDefaultCapacityBytes, kTestWait);
  Ranks ranks(kRanks, kN);
  Meeting ready(kRanks);
  const auto failures = on_ranks(group, ranks, [&](int r, RankBuffers& b, std::string& failure) {
    upload(b, b.in, std::vector<float>(kN, static_cast<float>(r + 1)));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      failure = "capture did not begin";
      return;
    }
    group.all_reduce_sum(r, b.in, kN, b.stream);
    const bool made = cudaStreamEndCapture(b.stream, &graph) == cudaSuccess &&
                      cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
                      cudaGraphUpload(exec, b.stream) == cudaSuccess && cudaStreamSynchronize(b.stream) == cudaSuccess;
    // No rank replays before every rank's graph is made: making one may wait for the GPU, where
    // another rank's replayed kernel would wait for this rank (on a GPU each it would not).
    if (!made) failure = "capture failed";
    if (!ready.arrive_and_wait(std::chrono::seconds(30)) && failure.empty()) failure = "another rank made no graph";
    if (!failure.empty()) return;
    for (int k = 0; k < 3; ++k) (void)cudaGraphLaunch(exec, b.stream);
    const std::vector<float> got = download(b, b.in, kN);
    const float s = kRanks * (kRanks + 1) / 2.0f, want = kRanks * kRanks * s;
    for (size_t i = 0; i < got.size() && failure.empty(); ++i)
      if (got[i] != want)
        failure = "replayed all-reduce gave " + std::to_string(got[i]) + ", want " + std::to_string(want);
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    group.check_open();  // a replay whose kernel gave up waiting says so, not only that its sum differs
  });
  expect_no_failures(failures);
}

// Rank 0 waits in an all-reduce that rank 1 never joins: the group's abort ends the wait, and the
// next collective throws naming why.
TEST(PeerGroup, AbortEndsARankWaitingForTheOthers) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  ops::cuda::PeerGroup group({0, 0});
  Ranks ranks(1, 64);
  upload(ranks[0], ranks[0].in, std::vector<float>(64, 1.0f));
  group.all_reduce_sum(0, ranks[0].in, 64, ranks[0].stream);  // queued; its kernel waits for rank 1
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    group.abort("rank 1 failed: out of memory");
  });
  (void)cudaStreamSynchronize(ranks[0].stream);  // returns once the kernel stopped waiting
  aborter.join();
  try {
    group.all_reduce_sum(0, ranks[0].in, 64, ranks[0].stream);
    FAIL() << "a collective of an aborted group ran";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: out of memory"), std::string::npos) << e.what();
  }
}

TEST(PeerGroup, ARankLeftWaitingGivesUpAfterTheTimeout) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  ops::cuda::PeerGroup group({0, 0}, ops::cuda::PeerGroup::kDefaultCapacityBytes, std::chrono::milliseconds(300));
  Ranks ranks(1, 64);
  upload(ranks[0], ranks[0].in, std::vector<float>(64, 1.0f));
  const auto t0 = std::chrono::steady_clock::now();
  group.all_reduce_sum(0, ranks[0].in, 64, ranks[0].stream);
  (void)cudaStreamSynchronize(ranks[0].stream);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 10.0);
  try {
    group.check_open();
    FAIL() << "a timed-out wait was not reported";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("waited 0.3 s for the others"), std::string::npos) << e.what();
  }
}

TEST(PeerGroup, AMessageOverTheBuffersIsRefusedBySize) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  ops::cuda::PeerGroup group({0}, 4096);
  auto o = ops::make_backend("cuda:0", "", /*enforce_eager=*/true);
  core::Tensor x = o->empty({1025});
  try {
    group.communicator(0)->all_reduce_sum(*o, x);  // through the communicator, as serve's ranks call it
    FAIL() << "a message of 4100 bytes went through buffers of 4096";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a message of 4100 bytes on rank 0 exceeds the buffers of 4096 bytes"),
              std::string::npos)
        << e.what();
  }
}

// What serve builds for ranks on a GPU each, with the one GPU there is: the start-up measurement
// (both algorithms, 4 KiB to the buffers' 4 MiB) and the routed group, whose all-reduce of one rank
// is the identity through whichever algorithm the choice picked.
TEST(GpuRankGroup, OneGpuMeasuresBothAlgorithmsAndRuns) {
#ifndef TESSERA_HAVE_NCCL
  TESSERA_SKIP_UNLESS_REQUIRED("built without NCCL (TESSERA_NCCL_ROOT)");
#else
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const ops::CollectiveChoice choice = ops::choose_collectives(1);
  for (const auto& line : ops::describe(choice)) std::printf("  %s\n", line.c_str());
  EXPECT_EQ(choice.source, "measured at start-up");
  ASSERT_EQ(choice.measured.size(), 6u);
  EXPECT_EQ(choice.measured.front().bytes, 4096u);
  EXPECT_EQ(choice.measured.back().bytes, 4u << 20);
  // NCCL's all-reduce of one rank copies nothing in place: its time may measure 0 (seen on an H200
  // from 256 KiB up), never less.
  for (const auto& t : choice.measured) EXPECT_TRUE(t.one_shot > 0 && t.nccl >= 0) << t.bytes;
  // The groups' memory, measured: at least the one-shot slots (2 x 4 MiB) when they are chosen.
  EXPECT_NE(choice.device_bytes_source.find("measured"), std::string::npos) << choice.device_bytes_source;
  if (choice.one_shot_max_bytes > 0) {
    EXPECT_GE(choice.device_bytes, 8u << 20);
  }
  auto group = ops::gpu_rank_group(1, choice);
  auto o = ops::make_backend("cuda:0", "", /*enforce_eager=*/true);
  for (int64_t n : {int64_t{7168}, int64_t{2} << 20}) {  // 28 KiB and 8 MiB: each algorithm's side
    const std::vector<float> mine = values(0, 1, n);
    core::Tensor x = o->from_host_f32({n}, mine.data());
    group->communicator(0)->all_reduce_sum(*o, x);
    EXPECT_EQ(o->to_host_f32(x), mine) << n;
  }
#endif
}

}  // namespace
}  // namespace tessera
