// How ranks on a GPU each pick the algorithm of a collective (issue 17; ops/comm/collective_choice.h,
// ops/comm/size_routed.h), on the CPU: the rule that turns measured times into a size limit, the
// lines plan prints, the timing loop and its check of the sums, the routing of each call by its
// message size, and TESSERA_ALL_REDUCE.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/comm/collective_choice.h"
#include "ops/comm/in_process.h"
#include "ops/comm/size_routed.h"

namespace tessera {
namespace {

TEST(CollectiveChoice, OneShotUpToTheLastSizeOfItsUnbrokenLead) {
  using T = ops::AllReduceTimes;
  // Wins at 4 and 16 KiB, loses at 64 KiB: 16 KiB, even though it wins again at 256 KiB.
  EXPECT_EQ(ops::one_shot_limit(
                {T{4096, 5e-6, 20e-6}, T{16384, 6e-6, 21e-6}, T{65536, 30e-6, 25e-6}, T{262144, 10e-6, 40e-6}}),
            16384u);
  EXPECT_EQ(ops::one_shot_limit({T{4096, 5e-6, 20e-6}, T{16384, 6e-6, 21e-6}}), 16384u);  // every size
  EXPECT_EQ(ops::one_shot_limit({T{4096, 25e-6, 20e-6}, T{16384, 6e-6, 21e-6}}), 0u);     // lost the smallest
  EXPECT_EQ(ops::one_shot_limit({T{4096, 20e-6, 20e-6}}), 0u);                            // a tie goes to NCCL
  EXPECT_EQ(ops::one_shot_limit({T{4096, 5e-6, 20e-6}, T{16384, -1, 21e-6}}), 4096u);     // over its buffers
  EXPECT_EQ(ops::one_shot_limit({}), 0u);
}

// The calls' time is the run less its copy; when the copy alone took as long (noise), the whole run
// is the bound: a measured size is never timed at zero.
TEST(CollectiveChoice, AllReduceSecondsSubtractTheCopyButNeverReachZero) {
  EXPECT_DOUBLE_EQ(ops::all_reduce_seconds(30e-6, 10e-6, 4), 5e-6);
  EXPECT_DOUBLE_EQ(ops::all_reduce_seconds(10e-6, 10e-6, 2), 5e-6);
  EXPECT_DOUBLE_EQ(ops::all_reduce_seconds(10e-6, 12e-6, 5), 2e-6);
}

TEST(CollectiveChoice, PlanLinesSayTheRuleAndTheTimes) {
  ops::CollectiveChoice c;
  c.one_shot_max_bytes = 65536;
  c.source = "measured at start-up";
  c.measured = {{4096, 6.04e-6, 19.5e-6}, {65536, 9e-6, 22e-6}, {8u << 20, -1, 80e-6}};
  const auto lines = ops::describe(c);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "one-shot over peer memory up to 64 KiB, NCCL above (measured at start-up)");
  EXPECT_NE(lines[1].find("4 KiB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("one-shot    6.0 us"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("NCCL   19.5 us"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("8 MiB: one-shot         -"), std::string::npos) << lines[3];

  ops::CollectiveChoice nccl;
  nccl.source = "TESSERA_ALL_REDUCE=nccl";
  EXPECT_EQ(ops::describe(nccl), std::vector<std::string>{"NCCL for every message (TESSERA_ALL_REDUCE=nccl)"});

  // The groups' device memory, when known, is the last line, with where the number came from.
  c.device_bytes = 600ull << 20;
  c.device_bytes_source = "measured on GPU 0 at start-up, both groups made and run";
  const auto with_memory = ops::describe(c);
  ASSERT_EQ(with_memory.size(), 5u);
  EXPECT_EQ(with_memory[4], "device memory 600.00 MiB a GPU (measured on GPU 0 at start-up, both groups made and run)");
}

// Unmeasured, a GPU's collectives are NCCL's estimate, plus two sets of a 4 MiB slot a rank when any
// message goes one-shot (64 MiB at 8 ranks).
TEST(CollectiveChoice, UnmeasuredDeviceMemoryIsNcclsEstimatePlusTheSlots) {
  ops::CollectiveChoice nccl_only;
  EXPECT_EQ(ops::collectives_device_bytes(nccl_only, 8), ops::kNcclDeviceBytesEstimate);
  ops::CollectiveChoice one_shot;
  one_shot.one_shot_max_bytes = 1u << 20;
  EXPECT_EQ(ops::collectives_device_bytes(one_shot, 8), ops::kNcclDeviceBytesEstimate + (64ull << 20));
  EXPECT_EQ(ops::collectives_device_bytes(one_shot, 2), ops::kNcclDeviceBytesEstimate + (16ull << 20));
}

ops::RankBackend cpu_ranks() {
  return [](int) { return ops::make_backend("cpu"); };
}

// An in-process group whose communicators count the collectives they carry and run each all-reduce
// through `all_reduce` (the rank's own communicator, its backend, x): the faulty and counting
// groups of these tests.
class TestGroup final : public ops::CommGroup {
 public:
  using AllReduce = std::function<void(ops::Communicator& inner, ops::Ops&, core::Tensor&)>;
  explicit TestGroup(int size, AllReduce all_reduce = {}) : inner_(size), all_reduce_(std::move(all_reduce)) {}
  int size() const override { return inner_.size(); }
  std::unique_ptr<ops::Communicator> communicator(int rank) override {
    return std::make_unique<Comm>(inner_.communicator(rank), *this);
  }
  void abort(const std::string& why) override { inner_.abort(why); }
  int calls() const { return calls_; }

 private:
  struct Comm final : ops::Communicator {
    Comm(std::unique_ptr<ops::Communicator> c, TestGroup& g) : inner(std::move(c)), group(g) {}
    int rank() const override { return inner->rank(); }
    int size() const override { return inner->size(); }
    void all_reduce_sum(ops::Ops& o, core::Tensor& x) override {
      ++group.calls_;
      if (group.all_reduce_)
        group.all_reduce_(*inner, o, x);
      else
        inner->all_reduce_sum(o, x);
    }
    void all_gather_cols(ops::Ops& o, const core::Tensor& p, core::Tensor& out) override {
      ++group.calls_;
      inner->all_gather_cols(o, p, out);
    }
    void reduce_scatter_cols(ops::Ops& o, const core::Tensor& x, core::Tensor& out) override {
      ++group.calls_;
      inner->reduce_scatter_cols(o, x, out);
    }
    std::unique_ptr<ops::Communicator> inner;
    TestGroup& group;
  };
  ops::InProcessGroup inner_;
  AllReduce all_reduce_;
  std::atomic<int> calls_{0};
};

// Rank 1 gets a wrong sum: the timing loop must name it, not time it.
std::unique_ptr<TestGroup> off_by_one_group(int size) {
  return std::make_unique<TestGroup>(size, [](ops::Communicator& inner, ops::Ops& o, core::Tensor& x) {
    inner.all_reduce_sum(o, x);
    if (inner.rank() == 1) x.data<float>()[x.numel() - 1] += 1.0f;
  });
}

TEST(CollectiveChoice, TimingChecksTheSumsAndTimesEverySize) {
  ops::InProcessGroup group(3);
  const auto seconds = ops::time_all_reduce(group, cpu_ranks(), {4096, 100, 65536}, 2);
  ASSERT_EQ(seconds.size(), 3u);
  for (double s : seconds) EXPECT_GT(s, 0.0);
}

TEST(CollectiveChoice, TimingRefusesAWrongSum) {
  auto group = off_by_one_group(2);
  try {
    (void)ops::time_all_reduce(*group, cpu_ranks(), {64}, 1);
    FAIL() << "a wrong sum was timed";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 got 4 at [15], want 3"), std::string::npos) << e.what();
  }
}

TEST(CollectiveChoice, MeasurementCoversFourKibToTheBuffers) {
  ops::InProcessGroup a(2), b(2);
  const ops::CollectiveChoice c = ops::measure_choice(a, 65536, b, cpu_ranks());
  ASSERT_EQ(c.measured.size(), 3u);
  EXPECT_EQ(c.measured[0].bytes, 4096u);
  EXPECT_EQ(c.measured[1].bytes, 16384u);
  EXPECT_EQ(c.measured[2].bytes, 65536u);
  for (const auto& t : c.measured) EXPECT_TRUE(t.one_shot > 0 && t.nccl > 0);
  EXPECT_EQ(c.one_shot_max_bytes, ops::one_shot_limit(c.measured));
  EXPECT_EQ(c.source, "measured at start-up");
}

// Rank 1 never joins the all-reduces: rank 0 waits until the deadline aborts the group with the
// caller's reason, which the run then throws.
TEST(CollectiveChoice, ARunPastItsDeadlineEndsWithTheCallersReason) {
  TestGroup group(2, [](ops::Communicator& inner, ops::Ops& o, core::Tensor& x) {
    if (inner.rank() != 1) inner.all_reduce_sum(o, x);
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)ops::time_all_reduce(group, cpu_ranks(), {64}, 1, std::chrono::milliseconds(200), "the link is down");
    FAIL() << "a rank waiting for an absent one returned";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the link is down (still running after 0.2 s)"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// A one-shot group that fails its check is no error: the choice falls back to NCCL and says why.
TEST(CollectiveChoice, AOneShotGroupThatFailsFallsBackToNccl) {
  auto broken = off_by_one_group(2);
  ops::InProcessGroup ring(2);
  const ops::CollectiveChoice c = ops::measure_choice(*broken, 16384, ring, cpu_ranks());
  EXPECT_EQ(c.one_shot_max_bytes, 0u);
  EXPECT_NE(c.source.find("the one-shot collectives failed at start-up: all-reduce of 4096 bytes: rank 1 got"),
            std::string::npos)
      << c.source;
  ASSERT_EQ(c.measured.size(), 2u);
  EXPECT_LT(c.measured[0].one_shot, 0.0);
  EXPECT_GT(c.measured[0].nccl, 0.0);
}

// Two ranks run an all-reduce of `n` floats, an all-gather into [1, n] and a reduce-scatter of
// [1, n] through `group`; returns rank 0's all-reduce result.
std::vector<float> run_collectives(ops::CommGroup& group, int64_t n) {
  auto cpu = ops::make_backend("cpu");
  std::vector<std::vector<float>> sums(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      core::Tensor x = core::Tensor::zeros(core::DType::kF32, {n});
      for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>((r + 1) * i);
      comm->all_reduce_sum(*cpu, x);
      sums[static_cast<size_t>(r)].assign(x.data<float>(), x.data<float>() + n);
      const auto [first, count] = ops::balanced_cols(n, 2, r);
      (void)first;
      core::Tensor part = core::Tensor::zeros(core::DType::kF32, {1, count});
      core::Tensor all = core::Tensor::zeros(core::DType::kF32, {1, n});
      comm->all_gather_cols(*cpu, part, all);
      core::Tensor mine = core::Tensor::zeros(core::DType::kF32, {1, count});
      comm->reduce_scatter_cols(*cpu, all, mine);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums[0], sums[1]);
  return sums[0];
}

TEST(SizeRoutedGroup, MessagesUpToTheLimitTakeTheSmallGroup) {
  auto small = std::make_unique<TestGroup>(2), large = std::make_unique<TestGroup>(2);
  TestGroup *s = small.get(), *l = large.get();
  ops::CollectiveChoice choice;
  choice.one_shot_max_bytes = 64;  // 16 floats
  ops::SizeRoutedGroup group(std::move(small), std::move(large), choice);
  const std::vector<float> sum16 = run_collectives(group, 16);
  EXPECT_EQ(s->calls(), 6);  // three collectives on each of two ranks
  EXPECT_EQ(l->calls(), 0);
  EXPECT_EQ(sum16[5], 15.0f);  // 5 + 10
  const std::vector<float> sum17 = run_collectives(group, 17);
  EXPECT_EQ(s->calls(), 6);
  EXPECT_EQ(l->calls(), 6);
  EXPECT_EQ(sum17[16], 48.0f);
}

TEST(SizeRoutedGroup, NoLimitSendsEverythingToTheLargeGroupAndAbortEndsBoth) {
  auto small = std::make_unique<TestGroup>(2), large = std::make_unique<TestGroup>(2);
  TestGroup *s = small.get(), *l = large.get();
  ops::SizeRoutedGroup group(std::move(small), std::move(large), ops::CollectiveChoice{});
  (void)run_collectives(group, 4);
  EXPECT_EQ(s->calls(), 0);
  EXPECT_EQ(l->calls(), 6);

  auto cpu = ops::make_backend("cpu");
  core::Tensor x = core::Tensor::zeros(core::DType::kF32, {4});
  std::string message;
  std::thread waiting([&] {
    try {
      group.communicator(0)->all_reduce_sum(*cpu, x);
    } catch (const core::Error& e) {
      message = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  group.abort("rank 1 failed");
  waiting.join();
  EXPECT_NE(message.find("rank 1 failed"), std::string::npos) << message;
  // The small group was aborted too.
  EXPECT_THROW(s->communicator(0)->all_reduce_sum(*cpu, x), core::Error);
}

TEST(SizeRoutedGroup, ALimitWithoutASmallGroupIsRefused) {
  ops::CollectiveChoice choice;
  choice.one_shot_max_bytes = 4096;
  EXPECT_THROW(ops::SizeRoutedGroup(nullptr, std::make_unique<ops::InProcessGroup>(2), choice), core::Error);
}

class AllReduceEnv : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("TESSERA_ALL_REDUCE"); }
};

TEST_F(AllReduceEnv, NcclNeedsNoMeasurementAndABadValueIsNamed) {
  ::setenv("TESSERA_ALL_REDUCE", "nccl", 1);
  const ops::CollectiveChoice c = ops::choose_collectives(2);
  EXPECT_EQ(c.one_shot_max_bytes, 0u);
  EXPECT_EQ(c.source, "TESSERA_ALL_REDUCE=nccl");
  EXPECT_TRUE(c.measured.empty());
  // Nothing measured: the plan counts NCCL's estimated memory.
  EXPECT_EQ(c.device_bytes, ops::kNcclDeviceBytesEstimate);
  EXPECT_NE(c.device_bytes_source.find("estimated"), std::string::npos) << c.device_bytes_source;
  ::setenv("TESSERA_ALL_REDUCE", "sometimes", 1);
  try {
    (void)ops::choose_collectives(2);
    FAIL() << "TESSERA_ALL_REDUCE=sometimes was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_ALL_REDUCE=sometimes: expected auto, nccl or one-shot"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera
