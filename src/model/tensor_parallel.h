// Tensor parallelism of the DeepSeek-V3 layer (DESIGN.md "Many GPUs", issue 17): which part of
// each weight a rank holds, and the ranks of one model as threads of this process.
//   attention: heads split over ranks (rows of q_b / q and kv_b, columns of o_proj); q_a, kv_a and
//              the latent norms on every rank; one all-reduce after o_proj.
//   MoE:       the router on every rank; routed expert e on rank e % size (12 experts on 8 ranks:
//              ranks 0-3 hold two); the shared expert and dense MLPs split by intermediate columns
//              (rows of gate / up, columns of down); one all-reduce after the block.
//   lm_head:   split over the vocabulary, the logits all-gathered. The embedding is on every rank.
//   KV cache:  sharded by position (kv_shard.h): each rank stores 1/size of every sequence's latent.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v3_weights.h"
#include "model/model.h"
#include "ops/comm/communicator.h"

namespace tessera::model {

struct TensorParallel {
  int rank = 0, size = 1;
  // Rank's share [begin, end) of n items in contiguous, balanced ranges (the first n % size ranks
  // get one more).
  std::pair<int64_t, int64_t> range(int64_t n) const;
  bool holds_expert(int64_t expert) const { return expert % size == rank; }
};

// Refuses, before any weight is read, a size the model cannot be split into: not dividing the
// attention heads, or more ranks than the MLPs have intermediate columns.
void check_tensor_parallel(const io::ModelConfig& config, int size);

// Rows [r0, r1) or columns [c0, c1) of `w` (one of the two whole), in its checkpoint format where
// the cut falls on its scale blocks: rows are views of the codes and scale rows (NVFP4 any rows,
// FP8 whole 128-row blocks, dense any rows), columns copies of the codes and scale columns (NVFP4
// whole groups of 16, FP8 whole 128-column blocks, dense in its dtype). Other cuts: an exact fp32
// copy (LinearWeight::dequant_row).
ops::LinearWeight linear_part(const ops::LinearWeight& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

// Rank tp.rank's share of `w`. Experts the rank holds and every replicated tensor stay views of the
// checkpoint in their format. A split linear stays in its format where the cut falls on its scale
// blocks (NVFP4: groups of 16 columns, any rows; FP8: 128 x 128 blocks; DeepSeek-V3's and
// Kimi-K2.5's splits over 8 ranks all do): rows are views of the codes and scales, columns copies
// of them (dense: views of rows, copies of columns in their dtype). Other cuts become exact fp32
// copies of their part (LinearWeight::dequant_row). Experts held by other ranks are left empty
// (ops::ExpertWeights::held() is false).
ModelWeights shard_weights(const ModelWeights& w, const io::ModelConfig& config, TensorParallel tp);

// The checkpoint bytes of rank tp.rank's share of `w` (by the rules of shard_weights, counted on
// the views: nothing is read or copied): the replicated tensors whole, each split linear's stored
// bytes in proportion to its part, the routed experts it holds.
uint64_t rank_weight_bytes(const ModelWeights& w, const io::ModelConfig& config, TensorParallel tp);
// The same for the checkpoint of `plan` (opened for its headers).
uint64_t rank_weight_bytes(const ModelPlan& plan, TensorParallel tp);

// How the ranks' KV caches are laid out.
struct RankKvLayout {
  bool sharded = true;                     // by position (kv_shard.h); false: the whole cache on every rank
  int64_t stored_page_size = kKvPageSize;  // positions of a page in a rank's storage
};

// The ranks of one model, each with its own backend, weight shard and communicator, over one
// mapped checkpoint.
struct LoadedRanks {
  std::unique_ptr<io::Checkpoint> checkpoint;
  io::ModelConfig config;
  io::KvCacheDtypeResolution kv_cache;
  std::vector<float> kv_scales;
  std::unique_ptr<ops::CommGroup> group;
  std::vector<std::unique_ptr<ops::Communicator>> comms;
  std::vector<std::unique_ptr<Model>> ranks;

  // Rank r's KV cache of num_pages pages on its backend (with a sharded layout, an engine page
  // covers stored_page_size x ranks positions).
  KvCache make_kv_cache(int rank, int64_t num_pages, RankKvLayout layout = {}) const;
};

// Where the ranks of load_model_ranks compute.
enum class RankDevices {
  kCpu,          // the CPU backend (the reference), joined by the in-process communicator
  kShareOneGpu,  // every rank a backend on the one `device`, eager (no CUDA graphs: the in-process
                 // communicator copies through the host); tests of the sharded CUDA kernels
  kOnePerGpu,    // rank r on GPU r (cuda:r), joined by NCCL and the one-shot kernels over peer
                 // memory (ops::gpu_rank_group): collectives on each rank's stream, decode steps as
                 // CUDA graphs unless enforce_eager
};
// The placement serve and generate use for tensor-parallel ranks on `device`: the CPU's threads,
// or a GPU each.
RankDevices rank_devices_for(const std::string& device);

// Loads `plan` as `size` ranks, threads of this process, each rank's weights on its own backend
// (`kernels` and `enforce_eager` as for make_backend). Throws naming heads and ranks for a size
// check_tensor_parallel refuses, for a GPU `device` with kCpu, and for kOnePerGpu where this build
// has no NCCL or the machine fewer GPUs than ranks.
LoadedRanks load_model_ranks(const ModelPlan& plan, int size, const std::string& device = "cpu",
                             RankDevices where = RankDevices::kCpu, const std::string& kernels = "",
                             bool enforce_eager = false);
// The ranks of serve and generate: on the plan's device (rank_devices_for), with its kernels and
// enforce_eager.
LoadedRanks load_model_ranks_for(const ModelPlan& plan, int size);

}  // namespace tessera::model
