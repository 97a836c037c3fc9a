#include "model/tensor_parallel.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"
#include "model/deepseek_v3.h"
#include "model/weight_staging.h"
#include "ops/backend.h"
#include "ops/comm/in_process.h"

namespace tessera::model {

using ops::LinearWeight;

std::pair<int64_t, int64_t> TensorParallel::range(int64_t n) const {
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

void check_tensor_parallel(const io::ModelConfig& config, int size) {
  TESSERA_CHECK(size >= 1, "--tensor-parallel-size {}: must be at least 1", size);
  TESSERA_CHECK(config.num_attention_heads % size == 0,
                "--tensor-parallel-size {}: the model's {} attention heads do not split evenly over {} ranks "
                "(use a size that divides {})",
                size, config.num_attention_heads, size, config.num_attention_heads);
  const int64_t inter = std::min(config.intermediate_size, config.n_shared_experts > 0
                                                               ? config.moe_intermediate_size * config.n_shared_experts
                                                               : config.intermediate_size);
  TESSERA_CHECK(inter >= size, "--tensor-parallel-size {}: more ranks than the MLPs' {} intermediate columns", size,
                inter);
}

namespace {

// Columns [c0, c1) of every row of a row-major [rows, cols] tensor (elements of any size; packed
// NVFP4 codes as bytes of two), copied.
core::Tensor copy_cols(const core::Tensor& t, int64_t c0, int64_t c1) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t es = core::dtype_size(t.dtype());
  core::Tensor out = core::Tensor::zeros(t.dtype(), {rows, c1 - c0});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<uint8_t>() + static_cast<size_t>(r * (c1 - c0)) * es,
                t.data<uint8_t>() + static_cast<size_t>(r * cols + c0) * es, static_cast<size_t>(c1 - c0) * es);
  return out;
}

// Whether [b, e) of n starts and ends on a block of `block` (the end may be n's).
bool on_blocks(int64_t b, int64_t e, int64_t n, int64_t block) { return b % block == 0 && (e % block == 0 || e == n); }

}  // namespace

LinearWeight linear_part(const LinearWeight& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  LinearWeight s = w;
  s.out = r1 - r0;
  s.in = c1 - c0;
  const bool all_rows = r0 == 0 && r1 == w.out, all_cols = c0 == 0 && c1 == w.in;
  using F = LinearWeight::Format;
  if (all_cols) {
    if (w.format == F::kDense) {
      s.weight = w.weight.slice_rows(r0, r1);
      return s;
    }
    if (w.format == F::kNvfp4) {
      s.weight = w.weight.slice_rows(r0, r1);
      s.scale = w.scale.slice_rows(r0, r1);
      return s;
    }
    if (on_blocks(r0, r1, w.out, w.block_rows)) {  // FP8
      s.weight = w.weight.slice_rows(r0, r1);
      s.scale = w.scale.slice_rows(r0 / w.block_rows, (r1 + w.block_rows - 1) / w.block_rows);
      return s;
    }
  } else if (all_rows) {
    if (w.format == F::kDense) {
      s.weight = copy_cols(w.weight, c0, c1);
      return s;
    }
    if (w.format == F::kNvfp4 && c0 % w.group_size == 0 && c1 % w.group_size == 0) {
      s.weight = copy_cols(w.weight, c0 / 2, c1 / 2);
      s.scale = copy_cols(w.scale, c0 / w.group_size, c1 / w.group_size);
      return s;
    }
    if (w.format == F::kFp8Block && on_blocks(c0, c1, w.in, w.block_cols)) {
      s.weight = copy_cols(w.weight, c0, c1);
      s.scale = copy_cols(w.scale, c0 / w.block_cols, (c1 + w.block_cols - 1) / w.block_cols);
      return s;
    }
  }
  LinearWeight f;  // an exact fp32 copy, dense
  f.name = w.name;
  f.out = s.out;
  f.in = s.in;
  f.weight = core::Tensor::zeros(core::DType::kF32, {f.out, f.in});
  std::vector<float> row(static_cast<size_t>(w.in));
  for (int64_t r = r0; r < r1; ++r) {
    w.dequant_row(r, row.data());
    std::copy(row.begin() + c0, row.begin() + c1, f.weight.data<float>() + (r - r0) * f.in);
  }
  return f;
}

namespace {

// Heads [h0, h1) of a weight with `per_head` rows (or columns) per head.
std::pair<int64_t, int64_t> scaled(std::pair<int64_t, int64_t> heads, int64_t per_head) {
  return {heads.first * per_head, heads.second * per_head};
}

// The part of one linear a rank holds: rows [r0, r1) and columns [c0, c1).
struct Share {
  int64_t r0, r1, c0, c1;
};

// The split rules of the header, in one place: calls cut(linear, share) for every linear of `w` that
// rank tp.rank holds part of (replicated linears are not visited: the rank holds them whole) and
// drop(expert) for every routed expert another rank holds.
template <class Cut, class Drop>
void for_each_share(ModelWeights& w, const io::ModelConfig& cfg, TensorParallel tp, Cut&& cut, Drop&& drop) {
  auto rows = [&](LinearWeight& l, std::pair<int64_t, int64_t> r) { cut(l, Share{r.first, r.second, 0, l.in}); };
  auto cols = [&](LinearWeight& l, std::pair<int64_t, int64_t> c) { cut(l, Share{0, l.out, c.first, c.second}); };
  // An MLP split by intermediate columns: gate and up by rows, down by columns.
  auto split_mlp = [&](ops::ExpertWeights& m) {
    const auto part = tp.range(m.gate.out);
    rows(m.gate, part);
    rows(m.up, part);
    cols(m.down, part);
  };
  rows(w.lm_head, tp.range(w.lm_head.out));
  const auto heads = tp.range(cfg.num_attention_heads);
  for (auto& L : w.layers) {
    auto& A = L.attn;
    if (A.q_b) rows(*A.q_b, scaled(heads, cfg.qk_head_dim()));
    if (A.q) rows(*A.q, scaled(heads, cfg.qk_head_dim()));
    rows(A.kv_b, scaled(heads, cfg.qk_nope_head_dim + cfg.v_head_dim));
    cols(A.o, scaled(heads, cfg.v_head_dim));
    if (!L.is_moe) {
      split_mlp(L.dense_mlp);
      continue;
    }
    for (size_t e = 0; e < L.moe.experts.size(); ++e)
      if (!tp.holds_expert(static_cast<int64_t>(e))) drop(L.moe.experts[e]);
    if (L.moe.shared) split_mlp(*L.moe.shared);
  }
}

}  // namespace

ModelWeights shard_weights(const ModelWeights& w, const io::ModelConfig& cfg, TensorParallel tp) {
  check_tensor_parallel(cfg, tp.size);
  if (tp.size == 1) return w;
  ModelWeights s = w;
  for_each_share(
      s, cfg, tp, [](LinearWeight& l, Share p) { l = linear_part(l, p.r0, p.r1, p.c0, p.c1); },
      [](ops::ExpertWeights& e) { e = ops::ExpertWeights{}; });
  return s;
}

uint64_t rank_weight_bytes(const ModelWeights& w, const io::ModelConfig& cfg, TensorParallel tp) {
  check_tensor_parallel(cfg, tp.size);
  ModelWeights s = w;  // views: nothing is read
  const bool tied = s.lm_head.weight.raw() == s.embed.raw();
  uint64_t whole = 0, cut = 0;
  double part = 0;
  auto tensor = [&](const core::Tensor& t) { whole += t.nbytes(); };
  visit_weights(s, tensor, tensor, [&](const LinearWeight& l, ops::LinearUse) {
    if (!(tied && &l == &s.lm_head)) whole += l.stored_bytes();
  });
  if (tp.size == 1) return whole;
  for_each_share(
      s, cfg, tp,
      [&](LinearWeight& l, Share p) {
        if (tied && &l == &s.lm_head) return;  // counted with the embedding, which every rank holds
        const uint64_t b = l.stored_bytes();
        cut += b;
        part += static_cast<double>(b) * static_cast<double>((p.r1 - p.r0) * (p.c1 - p.c0)) /
                static_cast<double>(l.out * l.in);
      },
      [&](ops::ExpertWeights& e) {
        for (const auto* l : {&e.gate, &e.up, &e.down}) cut += l->stored_bytes();
      });
  return whole - cut + static_cast<uint64_t>(part);
}

uint64_t rank_weight_bytes(const ModelPlan& plan, TensorParallel tp) {
  const auto checkpoint = io::Checkpoint::open(plan.dir);
  return rank_weight_bytes(load_deepseek_v3_weights(*checkpoint, plan.config, plan.quant), plan.config, tp);
}

KvCache LoadedRanks::make_kv_cache(int rank, int64_t num_pages, RankKvLayout layout) const {
  const int size = static_cast<int>(ranks.size());
  const KvShard shard = layout.sharded ? KvShard{rank, size} : KvShard{};
  ops::bind_to_this_thread(ranks.at(static_cast<size_t>(rank))->ops());  // the pages go to its GPU
  return KvCache(ranks.at(static_cast<size_t>(rank))->ops(), config.num_hidden_layers, num_pages,
                 config.kv_cache_entry_dim(), kv_cache.dtype, layout.stored_page_size, kv_scales, shard);
}

RankDevices rank_devices_for(const std::string& device) {
  return device == "cpu" ? RankDevices::kCpu : RankDevices::kOnePerGpu;
}

LoadedRanks load_model_ranks_for(const ModelPlan& plan, int size) {
  return load_model_ranks(plan, size, plan.device, rank_devices_for(plan.device), plan.kernels, plan.enforce_eager);
}

namespace {

// The communicator group of `size` ranks placed as `where` says, and each rank's --device.
std::pair<std::unique_ptr<ops::CommGroup>, std::vector<std::string>> rank_group(
    int size, const std::string& device, RankDevices where, const std::optional<ops::CollectiveChoice>& collectives) {
  std::vector<std::string> devices(static_cast<size_t>(size), device);
  if (where != RankDevices::kOnePerGpu) {
    TESSERA_CHECK(device == "cpu" || where == RankDevices::kShareOneGpu,
                  "--tensor-parallel-size {} on --device {}: ranks on a GPU run one a GPU (RankDevices::kOnePerGpu)",
                  size, device);
    return {std::make_unique<ops::InProcessGroup>(size), devices};
  }
  const ops::RankGroupKind nccl = ops::rank_group_kind(device, size, "nccl");
  TESSERA_CHECK(nccl.problem.empty(), "--tensor-parallel-size {} on --device {}: {}", size, device, nccl.problem);
  for (int r = 0; r < size; ++r) devices[static_cast<size_t>(r)] = nccl.device_of(r);
  return {ops::gpu_rank_group(size, collectives ? *collectives : ops::choose_collectives(size)), devices};
}

}  // namespace

LoadedRanks load_model_ranks(const ModelPlan& plan, int size, const std::string& device, RankDevices where,
                             const std::string& kernels, bool enforce_eager) {
  check_tensor_parallel(plan.config, size);
  auto placed = rank_group(size, device, where, plan.collectives);
  const std::vector<std::string> devices = std::move(placed.second);
  LoadedRanks m;
  m.config = plan.config;
  m.kv_cache = plan.kv_cache;
  m.checkpoint = io::Checkpoint::open(plan.dir);
  const ModelWeights weights = load_deepseek_v3_weights(*m.checkpoint, m.config, plan.quant);
  m.kv_scales = kv_cache_scales(weights, m.kv_cache.dtype);
  check_weights_finite(*m.checkpoint, weights);
  m.group = std::move(placed.first);
  // Ranks sharing a GPU run eagerly: a collective's host copies cannot be recorded in a graph.
  const bool eager = enforce_eager || where == RankDevices::kShareOneGpu;
  // Ranks on a GPU each load at once, a thread each (each copy goes to its own GPU); the others one
  // after another.
  m.ranks.resize(static_cast<size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  auto load = [&](int r) {
    try {
      auto backend = ops::make_backend(devices[static_cast<size_t>(r)], kernels, eager);
      ops::bind_to_this_thread(*backend);  // the rank's weights go to its GPU
      m.ranks[static_cast<size_t>(r)] =
          std::make_unique<DeepseekV3Model>(m.config, shard_weights(weights, m.config, {r, size}), std::move(backend),
                                            nullptr, TensorParallel{r, size}, m.comms[static_cast<size_t>(r)].get());
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  };
  for (int r = 0; r < size; ++r) m.comms.push_back(m.group->communicator(r));
  if (where == RankDevices::kOnePerGpu) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) threads.emplace_back(load, r);
    for (auto& t : threads) t.join();
  } else {
    for (int r = 0; r < size; ++r) load(r);
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (where == RankDevices::kOnePerGpu) ops::bind_to_this_thread(m.ranks.front()->ops());
  spdlog::info("tensor parallel: {} ranks ({}), {} attention heads and about {} routed experts each", size,
               where == RankDevices::kOnePerGpu     ? fmt::format("GPUs 0-{} over NCCL and peer memory", size - 1)
               : where == RankDevices::kShareOneGpu ? fmt::format("sharing {}", device)
                                                    : "CPU threads",
               m.config.num_attention_heads / size, (m.config.n_routed_experts + size - 1) / size);
  return m;
}

}  // namespace tessera::model
