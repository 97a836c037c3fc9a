// Tensor parallelism on the CPU backend, ranks as threads (issue 17): every size that divides the
// heads gives the logits of one rank (within 1e-5 rel_rms) and the same greedy tokens, on every
// fixture (12 experts on 8 ranks for the Kimi ones), with the KV cache sharded by position over the
// ranks (and whole on every rank); a size that does not divide the heads is refused before any
// weight is read. And the in-process communicator itself.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <random>
#include <ostream>
#include <string>
#include <thread>

#include "core/error.h"
#include "engine/tensor_parallel_executor.h"
#include "io/checkpoint.h"
#include "model/golden_util.h"
#include "model/tensor_parallel.h"
#include "ops/backend.h"
#include "ops/comm/in_process.h"
#include "support/engine_run.h"
#include "support/test_support.h"

namespace tessera {
namespace {

constexpr int64_t kPages = 16;

model::ModelPlan plan_of(const std::string& fixture) {
  model::LoadOptions lo;
  lo.kv_cache_dtype = "fp32";  // the exact cache: fp8 rounding would amplify summation-order noise
  const auto backend = ops::make_backend("cpu");
  return model::resolve_model(test::fixtures_dir() / "models" / fixture, lo, *backend);
}

const std::vector<int32_t> kPrompt = {1, 17, 230, 45, 901, 12, 7, 333, 64, 5, 818, 29};

// Logits of every prompt position, then of six decode steps fed with the greedy token (one
// sequence over pages 0 .. kPages - 1).
std::vector<float> step_logits(engine::Executor& ex, int64_t vocab) {
  auto& o = ex.sampling_ops();
  std::vector<int32_t> table(kPages);
  std::iota(table.begin(), table.end(), 0);
  model::StepBatch prefill;
  prefill.token_ids = kPrompt;
  prefill.seqs.push_back({0, static_cast<int64_t>(kPrompt.size()), table, true});
  std::vector<float> all = o.to_host_f32(ex.execute(prefill));
  int64_t pos = static_cast<int64_t>(kPrompt.size());
  for (int k = 0; k < 6; ++k, ++pos) {
    const float* last = all.data() + all.size() - vocab;
    model::StepBatch decode;
    decode.token_ids = {static_cast<int32_t>(test::argmax_row(last, vocab))};
    decode.seqs.push_back({pos, 1, table, false});
    const auto row = o.to_host_f32(ex.execute(decode));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// The KV cache sharded by position with pages of 2 stored positions, so that the 18 positions of
// step_logits (and the 24 of the engine run) are spread over every rank, or whole on every rank.
constexpr model::RankKvLayout kSharded{true, 2};
constexpr model::RankKvLayout kReplicated{false, model::kKvPageSize};

struct Case {
  std::string fixture;
  int size;
  model::RankKvLayout kv = kSharded;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " on " << c.size << " ranks, KV cache " << (c.kv.sharded ? "sharded" : "whole on every rank");
}

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelTest, MatchesOneRank) {
  const auto& [fixture, size, kv] = GetParam();
  const model::ModelPlan plan = plan_of(fixture);
  const int64_t V = plan.config.vocab_size;
  model::LoadedModel one = model::load_model(plan, ops::make_backend("cpu"));
  engine::LocalExecutor single(*one.model, one.make_kv_cache(kPages));
  const auto ref = step_logits(single, V);

  model::LoadedRanks ranks = model::load_model_ranks(plan, size);
  ASSERT_EQ(ranks.ranks.size(), static_cast<size_t>(size));
  engine::TensorParallelExecutor sharded(ranks, kPages, kv);
  EXPECT_EQ(sharded.page_size(), kv.sharded ? kv.stored_page_size * size : kv.stored_page_size);
  const auto got = step_logits(sharded, V);
  ASSERT_EQ(got.size(), ref.size());
  const double err = test::rel_rms(got, ref);
  std::printf("  %s, %d ranks: rel_rms %.3g over %zu logits\n", fixture.c_str(), size, err, got.size());
  EXPECT_LE(err, 1e-5);
  for (size_t r = 0; r < got.size() / V; ++r)
    ASSERT_EQ(test::argmax_row(got.data() + r * V, V), test::argmax_row(ref.data() + r * V, V)) << "row " << r;

  // Free-running greedy through the engine (scheduler, sampler) on both.
  const auto req = test::greedy_request(kPrompt, 12);
  const auto a = test::run_engine(one, req, {}, kPages);
  model::LoadedRanks again = model::load_model_ranks(plan, size);
  const auto b = test::run_engine(std::make_unique<engine::TensorParallelExecutor>(again, kPages, kv), req);
  ASSERT_EQ(a.tokens.size(), 12u);
  EXPECT_EQ(b.tokens, a.tokens);
}

// Every size that divides the heads: the DeepSeek-V3 fixtures have 4, the Kimi ones 8
// (HeadCountsOfTheFixtures checks it). The sharded cache on all; the whole cache on a few.
std::vector<Case> cases() {
  return {{"dsv3-tiny", 2},
          {"dsv3-tiny", 4},
          {"dsv3-tiny-fp8", 2},
          {"dsv3-tiny-fp8", 4},
          {"kimi-k2-tiny", 2},
          {"kimi-k2-tiny", 4},
          {"kimi-k2-tiny", 8},
          {"kimi-k25-tiny-nvfp4", 2},
          {"kimi-k25-tiny-nvfp4", 4},
          {"kimi-k25-tiny-nvfp4", 8},
          {"dsv3-tiny", 4, kReplicated},
          {"kimi-k2-tiny", 8, kReplicated},
          // Pages of 64 stored positions: the prompt is all on rank 0, the other ranks see nothing.
          {"kimi-k25-tiny-nvfp4", 8, {true, model::kKvPageSize}}};
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  const Case& c = info.param;
  return test::fixture_test_name(c.fixture) + "_tp" + std::to_string(c.size) +
         (c.kv.sharded ? "_kv_sharded_page" + std::to_string(c.kv.stored_page_size) : "_kv_whole");
});

TEST(TensorParallel, HeadCountsOfTheFixtures) {
  EXPECT_EQ(plan_of("dsv3-tiny").config.num_attention_heads, 4);
  EXPECT_EQ(plan_of("dsv3-tiny-fp8").config.num_attention_heads, 4);
  for (const char* kimi : {"kimi-k2-tiny", "kimi-k25-tiny-nvfp4"}) {
    const auto plan = plan_of(kimi);
    EXPECT_EQ(plan.config.num_attention_heads, 8) << kimi;
    // 12 experts on 8 ranks: the uneven split the issue names, each expert on exactly one rank.
    EXPECT_EQ(plan.config.n_routed_experts, 12) << kimi;
  }
  int held = 0;
  for (int r = 0; r < 8; ++r)
    for (int64_t e = 0; e < 12; ++e) held += model::TensorParallel{r, 8}.holds_expert(e) ? 1 : 0;
  EXPECT_EQ(held, 12);
}

TEST(TensorParallel, SizeThatDoesNotDivideTheHeadsIsRefusedBeforeLoading) {
  const auto plan = plan_of("dsv3-tiny");  // 4 heads
  try {
    model::load_model_ranks(plan, 3);
    FAIL() << "3 ranks accepted";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--tensor-parallel-size 3"), std::string::npos) << m;
    EXPECT_NE(m.find("4 attention heads"), std::string::npos) << m;
    EXPECT_NE(m.find("3 ranks"), std::string::npos) << m;
  }
  EXPECT_THROW(model::load_model_ranks(plan, 8), core::Error);  // 8 does not divide 4 either
  EXPECT_THROW(model::load_model_ranks(plan, 2, "cuda"), core::Error);
}

// A rank whose step throws stops the group: the step throws that rank's error (the other ranks,
// waiting for it in a collective, are released by the group's abort rather than left hanging), and
// so does every later step; the executor's rank threads still end with it.
class FailingRank final : public model::Model {
 public:
  explicit FailingRank(std::unique_ptr<model::Model> inner) : inner_(std::move(inner)) {}
  const io::ModelConfig& config() const override { return inner_->config(); }
  ops::Ops& ops() override { return inner_->ops(); }
  core::Tensor forward(const model::StepBatch& batch, model::KvCache& cache) override {
    if (fail) core::fail("injected failure of this rank");
    return inner_->forward(batch, cache);
  }
  uint64_t parameter_count() const override { return inner_->parameter_count(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::atomic<bool> fail{false};

 private:
  std::unique_ptr<model::Model> inner_;
};

TEST(TensorParallel, ARankThatFailsStopsTheGroupWithItsError) {
  const auto plan = plan_of("kimi-k2-tiny");
  model::LoadedRanks ranks = model::load_model_ranks(plan, 4);
  auto failing = std::make_unique<FailingRank>(std::move(ranks.ranks[2]));
  FailingRank* rank2 = failing.get();
  ranks.ranks[2] = std::move(failing);
  {
    engine::TensorParallelExecutor ex(ranks, kPages);
    const int64_t V = plan.config.vocab_size;
    EXPECT_EQ(step_logits(ex, V).size(), static_cast<size_t>((kPrompt.size() + 6) * V));  // all ranks well
    rank2->fail = true;
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        step_logits(ex, V);
        FAIL() << "a step with a failing rank returned";
      } catch (const core::Error& e) {
        const std::string m = e.what();
        // The first step names the failing rank's own error; later ones that rank's again (it
        // fails first) or the aborted group's, which names it.
        EXPECT_NE(m.find("injected failure of this rank"), std::string::npos) << m;
      }
    }
  }  // the executor's threads end here (a hang would time the test out)
}

// linear_part keeps a split linear in its checkpoint format where the cut falls on its scale blocks
// (rows as views, columns as copies of codes and scales) and is an exact fp32 copy elsewhere; either
// way each row of the part has the values of the same columns of the whole weight's row.
ops::LinearWeight random_linear(ops::LinearWeight::Format format, int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  ops::LinearWeight w;
  w.format = format;
  w.name = "test.proj";
  w.out = out;
  w.in = in;
  auto bytes = [&](core::DType dt, core::Shape shape, uint8_t and_mask) {
    core::Tensor t = core::Tensor::zeros(dt, shape);
    for (size_t i = 0; i < t.nbytes(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng()) & and_mask;
    return t;
  };
  switch (format) {
    case ops::LinearWeight::Format::kDense: {
      w.weight = core::Tensor::zeros(core::DType::kBF16, {out, in});
      for (int64_t i = 0; i < out * in; ++i)
        w.weight.data<uint16_t>()[i] = core::f32_to_bf16(static_cast<float>(static_cast<int>(rng() % 200) - 100) / 64);
      break;
    }
    case ops::LinearWeight::Format::kNvfp4:
      w.weight = bytes(core::DType::kU8, {out, in / 2}, 0xff);
      w.scale = bytes(core::DType::kF8E4M3, {out, in / 16}, 0x7e);  // positive, finite e4m3
      w.global_scale = 0.375f;
      break;
    case ops::LinearWeight::Format::kFp8Block: {
      w.weight = bytes(core::DType::kF8E4M3, {out, in}, 0xfe & 0xf7);  // finite codes
      w.scale = core::Tensor::zeros(core::DType::kF32, {(out + 127) / 128, (in + 127) / 128});
      for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<float>()[i] = 0.5f + static_cast<float>(i);
      break;
    }
  }
  return w;
}

TEST(TensorParallel, LinearPartsKeepTheCheckpointFormatOnScaleBlocks) {
  using F = ops::LinearWeight::Format;
  struct Cut {
    F format;
    int64_t out, in, r0, r1, c0, c1;
    F kept;  // the part's format
  };
  const std::vector<Cut> cuts = {
      {F::kFp8Block, 384, 320, 128, 384, 0, 320, F::kFp8Block},  // whole row blocks (the last one's end)
      {F::kFp8Block, 384, 320, 0, 384, 128, 320, F::kFp8Block},  // whole column blocks, a part block at the end
      {F::kFp8Block, 384, 320, 0, 96, 0, 320, F::kDense},        // rows inside a block: fp32
      {F::kFp8Block, 384, 320, 0, 384, 64, 192, F::kDense},      // columns across blocks: fp32
      {F::kNvfp4, 48, 96, 5, 29, 0, 96, F::kNvfp4},              // any rows
      {F::kNvfp4, 48, 96, 0, 48, 32, 80, F::kNvfp4},             // whole groups of 16
      {F::kNvfp4, 48, 96, 0, 48, 8, 40, F::kDense},              // half groups: fp32
      {F::kDense, 40, 24, 3, 17, 0, 24, F::kDense},              // rows: a view
      {F::kDense, 40, 24, 0, 40, 5, 19, F::kDense},              // columns: bf16 copy
  };
  for (size_t i = 0; i < cuts.size(); ++i) {
    const Cut& c = cuts[i];
    SCOPED_TRACE("cut " + std::to_string(i));
    const ops::LinearWeight w = random_linear(c.format, c.out, c.in, static_cast<uint32_t>(i + 1));
    const ops::LinearWeight p = model::linear_part(w, c.r0, c.r1, c.c0, c.c1);
    EXPECT_EQ(p.format, c.kept);
    ASSERT_EQ(p.out, c.r1 - c.r0);
    ASSERT_EQ(p.in, c.c1 - c.c0);
    if (c.kept == F::kDense && c.format == F::kDense) {
      EXPECT_EQ(p.weight.dtype(), core::DType::kBF16);
    }
    if (c.kept != c.format) {
      EXPECT_EQ(p.weight.dtype(), core::DType::kF32);
    }
    std::vector<float> whole(static_cast<size_t>(w.in)), part(static_cast<size_t>(p.in));
    for (int64_t r = c.r0; r < c.r1; ++r) {
      w.dequant_row(r, whole.data());
      p.dequant_row(r - c.r0, part.data());
      for (int64_t k = 0; k < p.in; ++k)
        ASSERT_EQ(part[static_cast<size_t>(k)], whole[static_cast<size_t>(c.c0 + k)]) << "row " << r << " col " << k;
    }
  }
}

// Ranks on GPUs of their own need a GPU each and NCCL: on a machine without two GPUs (CI has none,
// the device machine one) two such ranks are refused before any weight is read, naming the size and
// what is missing. serve and generate place ranks that way on --device cuda.
TEST(TensorParallel, RanksOnAGpuEachAreRefusedWithoutTwoGpusAndNccl) {
  EXPECT_EQ(model::rank_devices_for("cpu"), model::RankDevices::kCpu);
  EXPECT_EQ(model::rank_devices_for("cuda"), model::RankDevices::kOnePerGpu);
  EXPECT_EQ(model::rank_devices_for("cuda:1"), model::RankDevices::kOnePerGpu);
  const auto plan = plan_of("dsv3-tiny");
  try {
    model::load_model_ranks(plan, 2, "cuda", model::RankDevices::kOnePerGpu);
    GTEST_SKIP() << "this machine has two GPUs and NCCL: the ranks loaded";
  } catch (const core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--tensor-parallel-size 2 on --device cuda"), std::string::npos) << m;
    const bool names_why = m.find("2 ranks need 2 GPUs") != std::string::npos ||
                           m.find("no NCCL") != std::string::npos || m.find("no CUDA backend") != std::string::npos;
    EXPECT_TRUE(names_why) << m;
  }
}

// What `plan` prints per rank: one rank's bytes are the whole model's; of 8 ranks over 12 experts,
// rank 0 holds two experts a MoE layer and rank 7 one, and every rank holds the replicated tensors.
TEST(TensorParallel, RankWeightBytesFollowTheSplit) {
  const model::ModelPlan plan = plan_of("kimi-k25-tiny-nvfp4");
  model::LoadedModel one = model::load_model(plan, ops::make_backend("cpu"));
  EXPECT_EQ(model::rank_weight_bytes(plan, {0, 1}), one.model->weight_bytes());
  const uint64_t whole = one.model->weight_bytes();
  const auto checkpoint = io::Checkpoint::open(plan.dir);
  const model::ModelWeights w = model::load_deepseek_v3_weights(*checkpoint, plan.config, plan.quant);
  uint64_t expert = 0, moe_layers = 0;  // one routed expert's bytes, summed over the MoE layers
  for (const auto& L : w.layers)
    if (L.is_moe) {
      ++moe_layers;
      for (const auto* l : {&L.moe.experts[0].gate, &L.moe.experts[0].up, &L.moe.experts[0].down})
        expert += l->stored_bytes();
    }
  ASSERT_GT(moe_layers, 0u);
  const uint64_t r0 = model::rank_weight_bytes(plan, {0, 8}), r7 = model::rank_weight_bytes(plan, {7, 8});
  EXPECT_LT(r0, whole);
  EXPECT_GE(r0 - r7, expert);  // an expert a MoE layer more (and at most a column more of a split)
  EXPECT_LE(r0 - r7, expert + whole / 100);
  uint64_t sum = 0;
  for (int r = 0; r < 8; ++r) sum += model::rank_weight_bytes(plan, {r, 8});
  EXPECT_GT(sum, whole);  // the replicated tensors on every rank
}

TEST(TensorParallel, RangesAreBalancedAndCoverEverything) {
  for (int size : {1, 2, 3, 8})
    for (int64_t n : {8, 12, 13, 1024}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const auto [b, e] = model::TensorParallel{r, size}.range(n);
        EXPECT_EQ(b, next);
        EXPECT_TRUE(e - b == n / size || e - b == n / size + 1);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(InProcessCommunicator, AllReduceGivesEveryRankTheSameSum) {
  constexpr int kRanks = 3;
  ops::InProcessGroup group(kRanks);
  auto cpu = ops::make_backend("cpu");
  std::vector<core::Tensor> x;
  for (int r = 0; r < kRanks; ++r) {
    x.push_back(core::Tensor::zeros(core::DType::kF32, {2, 5}));
    for (int i = 0; i < 10; ++i) x.back().data<float>()[i] = static_cast<float>((r + 1) * 100 + i) * 0.1f;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      comm->all_reduce_sum(*cpu, x[static_cast<size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 10; ++i) {
    const float want = (100 + i) * 0.1f + (200 + i) * 0.1f + (300 + i) * 0.1f;
    EXPECT_NEAR(x[0].data<float>()[i], want, 1e-4f);
    for (int r = 1; r < kRanks; ++r) EXPECT_EQ(x[r].data<float>()[i], x[0].data<float>()[i]);  // same bits
  }
}

TEST(InProcessCommunicator, AllGatherPlacesPartsInRankOrder) {
  ops::InProcessGroup group(2);
  auto cpu = ops::make_backend("cpu");
  std::vector<core::Tensor> part = {core::Tensor::zeros(core::DType::kF32, {2, 3}),
                                    core::Tensor::zeros(core::DType::kF32, {2, 2})};
  for (int i = 0; i < 6; ++i) part[0].data<float>()[i] = static_cast<float>(i);
  for (int i = 0; i < 4; ++i) part[1].data<float>()[i] = static_cast<float>(10 + i);
  std::vector<core::Tensor> out = {core::Tensor::zeros(core::DType::kF32, {2, 5}),
                                   core::Tensor::zeros(core::DType::kF32, {2, 5})};
  std::thread other([&] { group.communicator(1)->all_gather_cols(*cpu, part[1], out[1]); });
  group.communicator(0)->all_gather_cols(*cpu, part[0], out[0]);
  other.join();
  const std::vector<float> want = {0, 1, 2, 10, 11, 3, 4, 5, 12, 13};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 10; ++i) EXPECT_EQ(out[r].data<float>()[i], want[static_cast<size_t>(i)]) << r << " " << i;
}

// 7 columns over 3 ranks: 3, 2 and 2 (the balanced split); each rank gets the sum of its columns.
TEST(InProcessCommunicator, ReduceScatterGivesEachRankTheSumOfItsColumns) {
  constexpr int kRanks = 3;
  ops::InProcessGroup group(kRanks);
  auto cpu = ops::make_backend("cpu");
  std::vector<core::Tensor> x, out;
  for (int r = 0; r < kRanks; ++r) {
    x.push_back(core::Tensor::zeros(core::DType::kF32, {2, 7}));
    for (int i = 0; i < 14; ++i) x.back().data<float>()[i] = static_cast<float>((r + 1) * 100 + i);
    out.push_back(core::Tensor::zeros(core::DType::kF32, {2, r == 0 ? 3 : 2}));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      group.communicator(r)->reduce_scatter_cols(*cpu, x[static_cast<size_t>(r)], out[static_cast<size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  const int first[kRanks] = {0, 3, 5};
  for (int r = 0; r < kRanks; ++r) {
    const int64_t cols = out[static_cast<size_t>(r)].dim(1);
    for (int64_t row = 0; row < 2; ++row)
      for (int64_t c = 0; c < cols; ++c) {
        const int i = static_cast<int>(row * 7 + first[r] + c);
        EXPECT_EQ(out[static_cast<size_t>(r)].data<float>()[row * cols + c], 600.0f + 3.0f * static_cast<float>(i))
            << "rank " << r << " row " << row << " column " << c;
      }
  }
  // An output that is not the rank's share is refused by name.
  ops::InProcessGroup lone(1);
  core::Tensor bad = core::Tensor::zeros(core::DType::kF32, {2, 6});
  EXPECT_THROW(lone.communicator(0)->reduce_scatter_cols(*cpu, x[0], bad), core::Error);
}

TEST(InProcessCommunicator, AbortReleasesARankWaitingForAFailedOne) {
  ops::InProcessGroup group(2);
  auto cpu = ops::make_backend("cpu");
  core::Tensor x = core::Tensor::zeros(core::DType::kF32, {4});
  std::atomic<bool> threw{false};
  std::string message;
  std::thread waiting([&] {
    try {
      group.communicator(0)->all_reduce_sum(*cpu, x);
    } catch (const core::Error& e) {
      message = e.what();
      threw = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  group.abort("rank 1 failed: out of memory");
  waiting.join();
  EXPECT_TRUE(threw);
  EXPECT_NE(message.find("rank 1 failed: out of memory"), std::string::npos) << message;
  EXPECT_THROW(group.communicator(1)->all_reduce_sum(*cpu, x), core::Error);  // later collectives too
}

}  // namespace
}  // namespace tessera
