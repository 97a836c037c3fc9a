// tessera bench decode --synthetic kimi-k2.5: decode steps of a random-weight model with a real
// model's layer shapes, timed per layer against the bytes a step must read (the weights of the
// experts actually routed to + attention weights + KV), divided by the bandwidth measured in the
// same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "cli/command.h"
#include "core/error.h"
#include "core/format.h"
#include "engine/runtime_plan.h"
#include "model/deepseek_v3.h"
#include "model/deepseek_v3_weights.h"
#include "model/kv_cache.h"
#include "model/kv_shard.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "ops/backend.h"
#include "ops/comm/lone_rank.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/tools/kernel_bench.h"
#include "ops/cuda/tools/kernel_trace.h"
#endif

namespace tessera::cli {
namespace {

struct DecodeArgs {
  std::string preset;
  int64_t layers = 0;  // 0: as many as fit
  std::vector<int64_t> batches = {1};
  int64_t context = 0;  // 0: kDefaultContext, or less where the preset's positions end sooner
  int steps = 10;
  std::string device = "cuda";
  std::string kernels;
  std::string kv_cache_dtype = "auto";  // auto: the backend's default
  std::string weights = "bf16";         // the linears' checkpoint format (model::SyntheticFormat)
  bool trace = false;                   // one more step per batch size, its kernels on the device clock
  bool enforce_eager = false;           // CUDA: no decode-step graphs
  int tensor_parallel_size = 1;         // > 1: rank 0's share of the split, timed alone
  bool kv_cache_whole = false;          // with tensor_parallel_size > 1: the rank holds the whole KV cache
};

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host-memory bf16 tensors for the CPU backend (tests and small presets).
core::Tensor host_random_bf16(core::Shape shape, float scale, uint64_t seed) {
  const int64_t n = core::shape_numel(shape);
  auto data = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& v : *data) v = core::f32_to_bf16(u(rng));
  return core::Tensor::adopt(core::DType::kBF16, std::move(shape), data->data(), core::Device::kCpu, data);
}

core::Tensor host_random_bytes(core::Shape shape, uint8_t and_mask, uint8_t or_mask, uint64_t seed) {
  const int64_t n = core::shape_numel(shape);
  auto data = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  for (auto& v : *data) v = static_cast<uint8_t>((rng() & and_mask) | or_mask);
  return core::Tensor::adopt(core::DType::kU8, std::move(shape), data->data(), core::Device::kCpu, data);
}

#ifdef TESSERA_HAVE_CUDA
// One step's kernels as the GPU ran them: start and end from the step's first kernel, and what each
// added to the step: how far its end moved the latest end so far (kernels that overlap earlier ones,
// under programmatic dependent launch or on the second stream, add only what sticks out).
void print_kernel_trace(const std::vector<ops::cuda::KernelSpan>& spans, int64_t batch) {
  if (spans.empty()) return;
  const uint64_t t0 = spans.front().start_ns;
  fmt::print(
      "\nkernels of one step at batch {} (device clock, µs from the first kernel's start; adds = how far the "
      "kernel's end moved the latest end before it):\n",
      batch);
  fmt::print("{:>9} {:>9} {:>8} {:>8} {:>7}  {}\n", "start", "end", "length", "adds", "stream", "kernel");
  // Frontier in end order, reported in start order.
  std::vector<size_t> by_end(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) by_end[i] = i;
  std::sort(by_end.begin(), by_end.end(), [&](size_t a, size_t b) { return spans[a].end_ns < spans[b].end_ns; });
  std::vector<double> adds(spans.size(), 0.0);
  uint64_t frontier = t0;
  for (size_t i : by_end) {
    adds[i] =
        spans[i].end_ns > frontier ? static_cast<double>(spans[i].end_ns - std::max(frontier, spans[i].start_ns)) : 0.0;
    frontier = std::max(frontier, spans[i].end_ns);
  }
  const uint64_t busy = ops::cuda::busy_ns(spans);
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& k = spans[i];
    fmt::print("{:>9.1f} {:>9.1f} {:>8.1f} {:>8.1f} {:>7}  {}\n", (k.start_ns - t0) / 1e3, (k.end_ns - t0) / 1e3,
               (k.end_ns - k.start_ns) / 1e3, adds[i] / 1e3, k.stream, k.name.substr(0, 90));
  }
  fmt::print("step span {:.1f} µs: kernels running {:.1f} µs, none running {:.1f} µs\n", (frontier - t0) / 1e3,
             busy / 1e3, (frontier - t0 - busy) / 1e3);
}
#endif

double host_copy_bandwidth() {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(bytes) / median(t);
}

#ifdef TESSERA_HAVE_CUDA
// Layers that fit in `free_bytes`, leaving room for the embedding, lm_head, KV and activations.
int64_t layers_that_fit(const std::string& preset, uint64_t free_bytes, int64_t max_batch, int64_t context,
                        double kv_elem_bytes) {
  const auto one = model::synthetic_config(preset, 1), two = model::synthetic_config(preset, 2);
  const double per_layer = 2.0 * static_cast<double>(two.parameter_count() - one.parameter_count());
  const double fixed = 2.0 * static_cast<double>(one.parameter_count()) - per_layer;
  const double kv_layer = kv_elem_bytes * static_cast<double>(one.kv_cache_entry_dim()) *
                          static_cast<double>(max_batch) * static_cast<double>(context + 64);
  const double margin = 4.0 * (1 << 30) + 0.04 * static_cast<double>(free_bytes);
  const int64_t n = static_cast<int64_t>((static_cast<double>(free_bytes) - fixed - margin) / (per_layer + kv_layer));
  if (n < 1)
    core::fail("--synthetic {}: one layer ({}) plus the embedding and lm_head ({}) does not fit in {} of free memory",
               preset, core::human_bytes(static_cast<uint64_t>(per_layer)),
               core::human_bytes(static_cast<uint64_t>(fixed)), core::human_bytes(free_bytes));
  return n;
}
#endif

constexpr int64_t kDefaultContext = 8192;

int run(const DecodeArgs& args) {
  DecodeArgs a = args;
  TESSERA_CHECK(a.steps >= 1, "--steps {}: at least one timed step", a.steps);
  // Every timed step writes one more position (plus the warm-up steps): the last must stay inside
  // the preset's max_position_embeddings, or the forward pass refuses it after the model is built.
  const int64_t positions = model::synthetic_config(a.preset, 1).max_position_embeddings;  // validates the name
  const int64_t room = positions - (a.steps + 3);
  if (a.context == 0) a.context = std::min(kDefaultContext, room);
  TESSERA_CHECK(a.context >= 1, "--context {}: at least one cached token", a.context);
  TESSERA_CHECK(a.context <= room,
                "--context {}: with --steps {} the last step reaches position {}, past the {} preset's "
                "max_position_embeddings {} (at most --context {})",
                a.context, a.steps, a.context + a.steps + 2, a.preset, positions, room);
  TESSERA_CHECK(!a.trace || a.device == "cuda", "--trace records CUDA kernels: it needs --device cuda (got {})",
                a.device);
  for (int64_t b : a.batches) TESSERA_CHECK(b >= 1, "--batch {}: at least one sequence", b);
  const int64_t max_batch = *std::max_element(a.batches.begin(), a.batches.end());
  const model::SyntheticFormat format = model::parse_synthetic_format(a.weights);
  // Rank 0's share of a tensor-parallel split, timed alone: what one GPU of N does per step.
  const model::TensorParallel tp{0, a.tensor_parallel_size};
  model::check_tensor_parallel(model::synthetic_config(a.preset, 1), tp.size);
  ops::LoneRankCommunicator lone(tp.rank, tp.size);
  ops::Communicator* comm = tp.size > 1 ? &lone : nullptr;
  // The rank's part of the KV cache sharded by position (model/kv_shard.h), unless --kv-cache-whole.
  const model::KvShard shard = tp.size > 1 && !a.kv_cache_whole ? model::KvShard{tp.rank, tp.size} : model::KvShard{};

  std::unique_ptr<ops::Ops> backend = ops::make_backend(a.device, a.kernels, a.enforce_eager);
  // No checkpoint, so no hint: an explicit --kv-cache-dtype or the backend's default.
  const core::KvCacheDtype kv_dtype = io::resolve_kv_cache_dtype(a.kv_cache_dtype, {}, backend->supported_kv_dtypes(),
                                                                 backend->default_kv_dtype(), backend->name())
                                          .dtype;
  model::RandomTensors random;
  double bandwidth = 0;
  int64_t layers = a.layers;
  uint64_t seed = 1;
  if (a.device == "cuda") {
#ifdef TESSERA_HAVE_CUDA
    fmt::print("device       {}\n", ops::cuda::device_description());
    bandwidth = ops::cuda::measure_copy_bandwidth(size_t{2} << 30, 10);
    if (layers == 0)
      layers = layers_that_fit(a.preset, ops::cuda::query_device_caps().free_bytes, max_batch, a.context,
                               static_cast<double>(model::KvCache::bytes_per_token(1, 1, kv_dtype)));
    random.bf16 = [&seed](core::Shape s, float scale) {
      return ops::cuda::random_bf16_tensor(std::move(s), scale, seed++);
    };
    random.bytes = [&seed](core::Shape s, uint8_t and_mask, uint8_t or_mask) {
      return ops::cuda::random_bytes_tensor(std::move(s), and_mask, or_mask, seed++);
    };
#endif
  } else {
    fmt::print("device       cpu (fp32 reference backend)\n");
    bandwidth = host_copy_bandwidth();
    if (layers == 0) layers = 1;
    random.bf16 = [&seed](core::Shape s, float scale) { return host_random_bf16(std::move(s), scale, seed++); };
    random.bytes = [&seed](core::Shape s, uint8_t and_mask, uint8_t or_mask) {
      return host_random_bytes(std::move(s), and_mask, or_mask, seed++);
    };
  }
  const io::ModelConfig cfg = model::synthetic_config(a.preset, layers);
  fmt::print("ceiling      copy bandwidth {:.0f} GB/s (read + write, measured now)\n", bandwidth / 1e9);

  model::ModelWeights weights = model::synthetic_weights(cfg, *backend, random, format, tp);
  // The kernel registry's choices for these shapes and weights, as `tessera plan` prints them for a
  // checkpoint: what the timed steps run.
  for (const std::string& line : engine::kernel_lines(backend->plan(cfg, kv_dtype, model::linear_groups(weights))))
    fmt::print("{}\n", line);
  model::DeepseekV3Model m(cfg, std::move(weights), std::move(backend), nullptr, tp, comm);
  ops::Ops& o = m.ops();
  const int64_t max_tokens = a.context + 2 + a.steps + 1;
  const int64_t pages_per_seq = model::pages_for_tokens(max_tokens, model::kKvPageSize * shard.size);
  model::KvCache cache(o, layers, max_batch * pages_per_seq, cfg.kv_cache_entry_dim(), kv_dtype, model::kKvPageSize, {},
                       shard);
  fmt::print(
      "model        synthetic {} with {} MoE layers of the real shapes (hidden {}, {} experts, {} active + {} "
      "shared, {} heads), random weights in {}: {}\n",
      a.preset, layers, cfg.hidden_size, cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_shared_experts,
      cfg.num_attention_heads, model::synthetic_format_name(format), core::human_bytes(m.weight_bytes()));
  if (shard.sharded()) {
    fmt::print(
        "kv cache     rank {} of {}: {} pages of {} of every {} positions ({}), context {} per sequence, {} of "
        "it on this rank\n",
        shard.rank, shard.size, cache.num_pages(), cache.stored_page_size(), cache.page_size(),
        core::kv_cache_dtype_name(kv_dtype), a.context,
        model::shard_positions_held(a.context, cache.stored_page_size(), shard));
  } else {
    fmt::print("kv cache     {} pages of {} ({}), context {} per sequence\n", cache.num_pages(), cache.page_size(),
               core::kv_cache_dtype_name(kv_dtype), a.context);
  }
  if (tp.size > 1) {
    int64_t held = 0;
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) held += tp.holds_expert(e) ? 1 : 0;
    fmt::print(
        "tensor       rank 0 of {} timed alone: {} of {} heads, {} of {} routed experts, 1/{} of the shared expert "
        "and lm_head; {}; the collectives are not run (add their latency for a step's time: {})\n",
        tp.size, cfg.num_attention_heads / tp.size, cfg.num_attention_heads, held, cfg.n_routed_experts, tp.size,
        shard.sharded() ? "its part of the KV cache sharded by position, attended for all heads"
                        : "the KV cache whole on the rank (--kv-cache-whole)",
        shard.sharded() ? "all-gathers of the absorbed queries and of the log-sum-exps, all-reduces of the "
                          "attention's latent outputs, after o_proj and after the MoE"
                        : "all-reduces after o_proj and after the MoE");
  }
  // A 1-layer twin on the same first-layer weights (shared, not copied) with a backend and a cache
  // of its own: the per-layer slope (step - twin's step) / (layers - 1) is free of what every step
  // pays once (launch latency, the first kernels' ramp, a graph replay's host check before its first
  // launch), which the head subtraction leaves in `layer us`.
  std::unique_ptr<model::DeepseekV3Model> twin;
  std::unique_ptr<model::KvCache> twin_cache;
  if (layers > 1) {
    try {
      model::ModelWeights first = m.weights();
      first.layers.resize(1);
      twin = std::make_unique<model::DeepseekV3Model>(model::synthetic_config(a.preset, 1), std::move(first),
                                                      ops::make_backend(a.device, a.kernels, a.enforce_eager), nullptr,
                                                      tp, comm);
      twin_cache = std::make_unique<model::KvCache>(twin->ops(), 1, max_batch * pages_per_seq, cfg.kv_cache_entry_dim(),
                                                    kv_dtype, model::kKvPageSize, std::vector<float>{}, shard);
      fmt::print("slope        against a 1-layer twin on the same weights\n");
    } catch (const core::Error& e) {
      twin.reset();
      fmt::print("slope        not measured: the 1-layer twin does not fit ({})\n", e.what());
    }
  }
  fmt::print("\n");

  fmt::print("{:>6} {:>10} {:>10} {:>11} {:>11} {:>8} {:>9} {:>12} {:>10} {:>8}\n", "batch", "step ms", "head ms",
             "layer us", "floor us", "of floor", "experts", "tokens/s", "slope us", "of floor");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
  const auto& w = m.weights();
  // Waits for the device (a one-element read-back): steps are timed on the host clock, without
  // copying the logits, which device-side sampling does not need.
  core::Tensor flag = o.empty_i32({1});
  auto wait = [&] { (void)o.to_host_i32(flag); };
  // Host-clock seconds of `work`, from an idle device to its end (on CUDA every backend object, the
  // twin's too, issues its work on the same stream, so one wait covers both).
  auto timed = [&](auto&& work) {
    wait();
    const auto t0 = Clock::now();
    work();
    wait();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Step s of a batch: every sequence's next token at position context + s.
  auto make_step = [&](int64_t batch, int s) {
    model::StepBatch step;
    for (int64_t i = 0; i < batch; ++i) {
      model::SequenceStep seq;
      seq.start_pos = a.context + s;
      seq.num_tokens = 1;
      for (int64_t p = 0; p < model::pages_for_tokens(seq.start_pos + 1, cache.page_size()); ++p)
        seq.block_table.push_back(static_cast<int32_t>(i * pages_per_seq + p));
      step.seqs.push_back(std::move(seq));
      step.token_ids.push_back(token(rng));
    }
    return step;
  };
  for (int64_t batch : a.batches) {
#ifdef TESSERA_HAVE_CUDA
    const ops::cuda::StepGraphStats graphs_before = ops::cuda::step_graph_stats(o);
#endif
    std::vector<double> step_s, head_s, twin_s;
    for (int s = 0; s < 2 + a.steps; ++s) {
      const model::StepBatch step = make_step(batch, s);
      const double dt = timed([&] { (void)m.forward(step, cache); });
      // The part of the step that is not a layer: final norm + lm_head (+ the logits' all-gather).
      core::Tensor x = o.empty({batch, cfg.hidden_size}), normed = o.empty({batch, cfg.hidden_size});
      core::Tensor head_logits = o.empty({batch, w.lm_head.out});  // a rank's share of the vocabulary
      core::Tensor all_logits = comm ? o.empty({batch, cfg.vocab_size}) : core::Tensor{};
      const double dh = timed([&] {
        o.rms_norm(x, w.final_norm, static_cast<float>(cfg.rms_norm_eps), normed);
        o.linear(normed, w.lm_head, head_logits);
        if (comm) comm->all_gather_cols(o, head_logits, all_logits);
      });
      const double d1 = twin ? timed([&] { (void)twin->forward(step, *twin_cache); }) : 0.0;
      if (s >= 2) {
        step_s.push_back(dt);
        head_s.push_back(dh);
        twin_s.push_back(d1);
      }
    }
    const double step = median(step_s), head = median(head_s);
    const double layer = std::max(0.0, step - head) / static_cast<double>(layers);
    const model::DecodeLayerBytes bytes = model::decode_layer_bytes(
        cfg, batch, a.context, static_cast<double>(model::KvCache::bytes_per_token(1, 1, kv_dtype)), format, tp, shard);
    const double floor = bytes.total() / bandwidth;  // the copy moves read + write bytes at this rate
    fmt::print("{:>6} {:>10.3f} {:>10.3f} {:>11.1f} {:>11.1f} {:>7.0f}% {:>9.1f} {:>12.1f}", batch, step * 1e3,
               head * 1e3, layer * 1e6, floor * 1e6, 100.0 * floor / layer, bytes.expected_experts,
               static_cast<double>(batch) / step);
    if (twin) {
      const double slope = (step - median(twin_s)) / static_cast<double>(layers - 1);
      fmt::print(" {:>10.1f} {:>7.0f}%", slope * 1e6, 100.0 * floor / slope);
    }
    fmt::print("\n");
#ifdef TESSERA_HAVE_CUDA
    if (a.device == "cuda") {
      const ops::cuda::StepGraphStats g = ops::cuda::step_graph_stats(o);
      const int64_t replayed = g.replayed - graphs_before.replayed;
      fmt::print("       steps as CUDA graphs: {} replayed, {} recorded, {} eager, {} stale{}", replayed,
                 g.recorded - graphs_before.recorded, g.eager - graphs_before.eager, g.stale - graphs_before.stale,
                 a.enforce_eager ? " (--enforce-eager)" : "");
      if (replayed > 0)
        fmt::print("; a replay's host pass {:.0f} µs",
                   (g.replay_host_seconds - graphs_before.replay_host_seconds) / static_cast<double>(replayed) * 1e6);
      fmt::print("\n");
    }
#endif
    std::fflush(stdout);
#ifdef TESSERA_HAVE_CUDA
    if (a.trace) {
      // One more step (the cache holds one more position), untimed, its kernels recorded.
      const model::StepBatch step = make_step(batch, 2 + a.steps);
      wait();
      ops::cuda::KernelTrace trace;
      (void)m.forward(step, cache);
      print_kernel_trace(trace.stop(), batch);
      fmt::print("\n");
    }
#endif
  }
  fmt::print(
      "\nfloor = bytes a layer must read / copy bandwidth: attention weights, router, shared expert, "
      "the expected distinct routed experts E(1-(1-k/E)^batch) and the KV of every sequence; "
      "layer = (step - head) / layers, where head = final norm + lm_head, timed alone "
      "(logits stay on the device); tokens/s = batch / step for this {}-layer model; slope = (step - the "
      "1-layer twin's step) / (layers - 1), free of the costs every step pays once.\n",
      layers);
  return 0;
}

CommandRegistration reg{
    {"decode",
     "decode steps of a random-weight model with a real model's layer shapes, per layer against the bytes-moved floor",
     [](CLI::App& app) {
       auto a = std::make_shared<DecodeArgs>();
       app.add_option("--synthetic", a->preset, "layer shapes of: kimi-k2.5, deepseek-v3, tiny")->required();
       app.add_option("--layers", a->layers, "MoE layers to build (default: as many as fit on the GPU)");
       app.add_option("--batch", a->batches, "concurrent sequences, one new token each (several: 1,16,128)")
           ->delimiter(',')
           ->capture_default_str();
       app.add_option("--context", a->context,
                      "tokens already cached per sequence (default: 8192, or less where the preset's "
                      "max_position_embeddings ends sooner)");
       app.add_option("--steps", a->steps, "timed decode steps per batch size (median reported)")
           ->capture_default_str();
       app.add_option("--device", a->device, "cuda, or cpu (the fp32 reference; small presets)")->capture_default_str();
       app.add_option("--kernels", a->kernels, "force CUDA kernels, as for serve");
       app.add_option(
              "--weights", a->weights,
              "the linears' format: bf16; fp8 (DeepSeek-V3 FP8 blocks); nvfp4 (Kimi-K2.5: routed experts NVFP4)")
           ->capture_default_str();
       app.add_option("--kv-cache-dtype", a->kv_cache_dtype,
                      "KV cache element type: auto (the backend's default), fp32, bf16, fp8")
           ->capture_default_str();
       app.add_flag("--enforce-eager", a->enforce_eager,
                    "CUDA: launch each step's kernels one by one instead of replaying a CUDA graph");
       app.add_option("--tensor-parallel-size", a->tensor_parallel_size,
                      "time one rank's share of a split over this many GPUs (rank 0: its heads, routed experts, "
                      "shared-expert columns, its part of the KV cache sharded by position), the collectives not "
                      "run; must divide the heads")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       app.add_flag("--kv-cache-whole", a->kv_cache_whole,
                    "with --tensor-parallel-size: the rank holds the whole KV cache instead of its part (the layout "
                    "before the KV cache was sharded, for comparison)");
       app.add_flag("--trace", a->trace,
                    "after each batch size, one more step with its kernels' device start and end times (CUDA: "
                    "loads the toolkit's CUPTI library)");
       return [a] { return run(*a); };
     },
     "bench"}};

}  // namespace
}  // namespace tessera::cli
