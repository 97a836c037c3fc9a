// Tensor parallelism with CUDA ranks that share the one GPU through the in-process communicator, and
// with a GPU each over NCCL and peer memory as serve places them (those with as many ranks as the
// machine has GPUs) (issue 17): each fixture split over 2 and 4
// ranks (and 8 on the 8-head ones: 12 experts on 8 ranks) gives prompt logits within the bf16 noise floor of
// transformers' fp32 reference, as one CUDA rank does, and close to that one rank; so do decode steps after the prompt.
// This runs the sharded weights (split heads, experts held by one rank each, split MLP columns, vocabulary-split
// lm_head) and the KV cache sharded by position (and, for comparison, whole on every rank) through
// the CUDA kernels without several GPUs. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <nlohmann/json.hpp>
#include <ostream>

#include "engine/executor.h"
#include "engine/tensor_parallel_executor.h"
#include "io/safetensors.h"
#include "model/checkpoint_presets.h"
#include "model/golden_util.h"
#include "model/random_checkpoint.h"
#include "model/tensor_parallel.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "support/require_gpu.h"
#include "support/test_support.h"

namespace tessera {
namespace {

constexpr int64_t kPages = 16;  // 1024 tokens: the longest fixture prompt is 700

// The block table of one sequence: pages 0, 1, ..., kPages - 1.
std::vector<int32_t> all_pages() {
  std::vector<int32_t> t(kPages);
  for (int32_t p = 0; p < kPages; ++p) t[static_cast<size_t>(p)] = p;
  return t;
}

// Logits of every position of `prompt`, prefilled as one sequence.
std::vector<float> prompt_logits(engine::Executor& ex, const std::vector<int32_t>& prompt) {
  model::StepBatch b;
  b.token_ids = prompt;
  model::SequenceStep s;
  s.num_tokens = static_cast<int64_t>(prompt.size());
  s.block_table = all_pages();
  s.all_logits = true;
  b.seqs.push_back(s);
  return ex.sampling_ops().to_host_f32(ex.execute(b));
}

// The logits of one decode step of `token` at position `pos` of that sequence.
std::vector<float> decode_logits(engine::Executor& ex, int32_t token, int64_t pos) {
  model::StepBatch b;
  b.token_ids = {token};
  b.seqs.push_back({pos, 1, all_pages(), false});
  return ex.sampling_ops().to_host_f32(ex.execute(b));
}

// The rows of `v` ([tokens, V]) but row `skip`.
std::vector<float> rows_except(const std::vector<float>& v, int64_t V, int64_t skip) {
  std::vector<float> r;
  for (int64_t t = 0; t < static_cast<int64_t>(v.size()) / V; ++t)
    if (t != skip) r.insert(r.end(), v.begin() + t * V, v.begin() + (t + 1) * V);
  return r;
}

// The row of `b` furthest from the same row of `a`, and how far (rel_rms).
std::pair<int64_t, double> furthest_row(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  std::pair<int64_t, double> worst{-1, 0.0};
  for (int64_t t = 0; t < static_cast<int64_t>(a.size()) / V; ++t) {
    const std::vector<float> at(a.begin() + t * V, a.begin() + (t + 1) * V),
        bt(b.begin() + t * V, b.begin() + (t + 1) * V);
    const double e = test::rel_rms(bt, at);
    if (e > worst.second) worst = {t, e};
  }
  return worst;
}

// Four decode steps after a prompt whose last logits are `last`, the one rank's greedy tokens fed to
// both executors: each step's distance from one rank (printed), sorted. As for a prompt's tokens,
// one step's routing may flip at a near-tie (dsv3-tiny on 2 ranks after prompt 4: 0.42 at one step,
// 0.003-0.004 at the others, which attend over the same cache), so callers hold all but the largest
// to their bound; a wrong cache or merge moves every step.
std::vector<double> decode_step_distances(engine::Executor& single, engine::Executor& sharded, std::vector<float> last,
                                          int64_t first_pos, int64_t V) {
  std::vector<double> steps;
  for (int k = 0; k < 4; ++k) {
    const auto token = static_cast<int32_t>(test::argmax_row(last.data(), V));
    const int64_t pos = first_pos + k;
    const auto da = decode_logits(single, token, pos), db = decode_logits(sharded, token, pos);
    steps.push_back(test::rel_rms(db, da));
    std::printf("    decode step %d (position %lld): %.4g from one rank\n", k, static_cast<long long>(pos),
                steps.back());
    last = da;
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

struct Case {
  std::string fixture;
  int size;
  bool kv_sharded = true;
  // kShareOneGpu: every rank on GPU 0 through the in-process communicator, eagerly.
  // kOnePerGpu: rank r on GPU r over NCCL and peer memory, decode steps as CUDA graphs (serve's
  // placement); skipped where the machine has fewer GPUs.
  model::RankDevices where = model::RankDevices::kShareOneGpu;
};

const char* placement_name(model::RankDevices where) {
  switch (where) {
    case model::RankDevices::kOnePerGpu:
      return "gpu_each";
    default:
      return "";
  }
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " on " << c.size << " ranks"
      << (c.where == model::RankDevices::kOnePerGpu ? " (a GPU each, NCCL and peer memory)" : " sharing GPU 0")
      << ", KV cache " << (c.kv_sharded ? "sharded" : "whole");
}

class CudaTensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaTensorParallelTest, RanksStayWithinTheBf16Floor) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const auto& [fixture, size, kv_sharded, where] = GetParam();
  const bool gpu_each = where == model::RankDevices::kOnePerGpu;
#ifndef TESSERA_HAVE_NCCL
  if (gpu_each) GTEST_SKIP() << "this build has no NCCL";
#endif
  if (gpu_each && size > ops::cuda::cuda_device_count())
    GTEST_SKIP() << size << " ranks on a GPU each: this machine has " << ops::cuda::cuda_device_count();
  const auto dir = test::fixtures_dir() / "models" / fixture;
  auto golden = io::SafetensorsFile::open(dir / "golden.safetensors");
  const auto meta = nlohmann::json::parse(test::read_file(dir / "golden.json"));
  // The floors were measured without KV quantization: pin the bf16 cache.
  model::LoadOptions lo;
  lo.device = "cuda";
  lo.kv_cache_dtype = "bf16";
  const model::ModelPlan plan = model::resolve_model(dir, lo, *ops::make_backend("cuda"));
  model::LoadedModel one = model::load_model(plan, ops::make_backend("cuda", "", /*enforce_eager=*/true));
  engine::LocalExecutor single(*one.model, one.make_kv_cache(kPages));
  model::LoadedRanks ranks = model::load_model_ranks(plan, size, "cuda", where);
  ASSERT_EQ(ranks.ranks.size(), static_cast<size_t>(size));
  engine::TensorParallelExecutor sharded(ranks, kPages, {kv_sharded, model::kKvPageSize});
  for (const auto& p : meta["prompts"]) {
    const int i = p["index"];
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto pt = golden->tensor("prompt." + std::to_string(i));
    const std::vector<int32_t> prompt(pt.data<int32_t>(), pt.data<int32_t>() + pt.numel());
    const auto rt = golden->tensor("logits." + std::to_string(i));
    const std::vector<float> ref(rt.data<float>(), rt.data<float>() + rt.numel());
    const auto a = prompt_logits(single, prompt), b = prompt_logits(sharded, prompt);
    ASSERT_EQ(a.size(), ref.size());
    ASSERT_EQ(b.size(), ref.size());
    const double floor = p["hf_bf16_vs_fp32_reference"]["rel_rms"];
    const double one_err = test::rel_rms(a, ref);
    // The ranks' sums run in another order than one rank's, so a near-tie of the router's top-k
    // groups can flip for a token: that token's logits then follow other experts (dsv3-tiny-fp8 on
    // 4 ranks, prompt 1, token 0 of layer 2: groups {0, 1} against {1, 3}, seen by dumping the
    // routing). The prompt's other tokens are held to the bounds; a systematic error moves them all.
    const int64_t V = static_cast<int64_t>(ref.size() / prompt.size());
    const auto [flipped, worst] = prompt.size() > 1 ? furthest_row(a, b, V) : std::pair<int64_t, double>{-1, 0.0};
    const auto b_kept = rows_except(b, V, flipped), a_kept = rows_except(a, V, flipped),
               ref_kept = rows_except(ref, V, flipped);
    const double tp_err = test::rel_rms(b_kept, ref_kept), apart = test::rel_rms(b_kept, a_kept);
    std::printf(
        "  %s prompt %d (%zu tokens), %d ranks: rel_rms %.4g (one rank %.4g, floor %.4g), %.4g from one rank "
        "(all tokens %.4g; the token furthest from one rank, %lld, left out: %.4g)\n",
        fixture.c_str(), i, prompt.size(), size, tp_err, one_err, floor, apart, test::rel_rms(b, a),
        static_cast<long long>(flipped), worst);
    EXPECT_LE(one_err, 1.5 * floor);
    EXPECT_LE(tp_err, 1.5 * floor);
    // Two bf16 engines, each within the floor of the reference, are within twice it of each other.
    EXPECT_LE(apart, 3.0 * floor);
    // Decode steps after the prompt: on the decode kernels, over a cache each rank holds part of.
    const auto steps =
        decode_step_distances(single, sharded, std::vector<float>(a.end() - V, a.end()), prompt.size(), V);
    for (size_t k = 0; k + 1 < steps.size(); ++k) EXPECT_LE(steps[k], 3.0 * floor) << "decode steps";
  }
}

// One MoE layer of Kimi-K2.5's real shapes (hidden 7168, 64 heads, 384 NVFP4 routed experts + the
// shared one; a vocabulary of 32768 to keep the file small: ~11 GB), written by the checkpoint
// writer, split over 8 ranks sharing the GPU (each 8 heads, 48 experts, 1/8 of the shared expert and
// the KV cache sharded by position) against one CUDA rank and the CPU reference: the prompt's logits
// within 1.5x the one rank's distance from the reference, and decode steps within 3x of one rank.
TEST(CudaTensorParallel, SyntheticKimiLayerOnEightRanksMatchesOneRank) {
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const auto dir = test::make_temp_dir("tp-kimi-layer");
  model::CheckpointDims dims = model::real_dims(model::CheckpointKind::kKimiK25Nvfp4);
  dims.layers = 1;
  dims.experts = 384;
  dims.vocab = 32768;
  model::finalize_dims(model::CheckpointKind::kKimiK25Nvfp4, dims);
  model::RandomCheckpointOptions wo;
  wo.seed = 17;
  model::write_random_checkpoint(dir, model::checkpoint_layout(model::CheckpointKind::kKimiK25Nvfp4, dims), wo);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};

  model::LoadOptions lo;
  lo.kv_cache_dtype = "fp32";
  const model::ModelPlan cpu_plan = model::resolve_model(dir, lo, *ops::make_backend("cpu"));
  ASSERT_EQ(cpu_plan.config.n_routed_experts, 384);
  ASSERT_EQ(cpu_plan.config.num_attention_heads, 64);
  lo.device = "cuda";
  lo.kv_cache_dtype = "bf16";
  const model::ModelPlan plan = model::resolve_model(dir, lo, *ops::make_backend("cuda"));
  const int64_t V = plan.config.vocab_size;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 24; ++i) prompt.push_back((i * 7919 + 13) % static_cast<int32_t>(V));

  model::LoadedModel cpu = model::load_model(cpu_plan, ops::make_backend("cpu"));
  engine::LocalExecutor reference(*cpu.model, cpu.make_kv_cache(kPages));
  const auto want = prompt_logits(reference, prompt);
  model::LoadedModel one = model::load_model(plan, ops::make_backend("cuda", "", /*enforce_eager=*/true));
  engine::LocalExecutor single(*one.model, one.make_kv_cache(kPages));
  const auto a = prompt_logits(single, prompt);
  model::LoadedRanks ranks = model::load_model_ranks(plan, 8, "cuda", model::RankDevices::kShareOneGpu);
  engine::TensorParallelExecutor sharded(ranks, kPages);  // the KV cache sharded by position
  const auto b = prompt_logits(sharded, prompt);
  ASSERT_EQ(a.size(), want.size());
  ASSERT_EQ(b.size(), want.size());
  // As for the fixtures, a token whose routing flips at a near-tie of its top-8 is left out.
  const auto [skip, worst] = furthest_row(a, b, V);
  const double floor = test::rel_rms(rows_except(a, V, skip), rows_except(want, V, skip));
  const double tp_err = test::rel_rms(rows_except(b, V, skip), rows_except(want, V, skip));
  const double apart = test::rel_rms(rows_except(b, V, skip), rows_except(a, V, skip));
  std::printf(
      "  Kimi-K2.5 layer, 8 ranks: rel_rms %.4g to the CPU reference (one rank %.4g), %.4g from one rank "
      "(token %lld left out: %.4g)\n",
      tp_err, floor, apart, static_cast<long long>(skip), worst);
  EXPECT_GT(floor, 0.0);
  EXPECT_LE(tp_err, 1.5 * floor);
  EXPECT_LE(apart, 3.0 * floor);
  const auto steps = decode_step_distances(single, sharded, std::vector<float>(a.end() - V, a.end()), prompt.size(), V);
  for (size_t k = 0; k + 1 < steps.size(); ++k) EXPECT_LE(steps[k], 3.0 * floor) << "decode steps";
}

std::vector<Case> cases() {
  std::vector<Case> v = {{"dsv3-tiny", 2},           {"dsv3-tiny", 4},           {"dsv3-tiny-fp8", 4},
                         {"kimi-k2-tiny", 8},        {"kimi-k25-tiny-nvfp4", 2}, {"kimi-k25-tiny-nvfp4", 8},
                         {"kimi-k2-tiny", 8, false}, {"dsv3-tiny", 4, false}};
  // A GPU each: one rank (NCCL's lone rank: runs on one GPU), and as many as a machine may lend.
  constexpr auto each = model::RankDevices::kOnePerGpu;
  for (int size : {1, 2, 4, 8}) {
    v.push_back({"kimi-k25-tiny-nvfp4", size, true, each});
    if (size <= 4) v.push_back({"dsv3-tiny-fp8", size, true, each});
  }
  v.push_back({"kimi-k2-tiny", 8, false, each});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallelTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  return test::fixture_test_name(info.param.fixture) + "_tp" + std::to_string(info.param.size) +
         (info.param.kv_sharded ? "_kv_sharded" : "_kv_whole") +
         (*placement_name(info.param.where) ? std::string("_") + placement_name(info.param.where) : "");
});

}  // namespace
}  // namespace tessera
