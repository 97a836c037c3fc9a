// The KV memory plan, resolved once at start-up (DESIGN.md "Configuration resolution"): how many
// bytes the KV pool gets, how many pages and tokens that is, and the max model length. The CPU
// backend sizes the pool from --kv-cache-bytes or a default; a GPU backend's budget
// (device_kv_budget) is the pool when --kv-cache-bytes is not given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::engine {

struct MemoryPlanInput {
  std::optional<uint64_t> kv_cache_bytes;   // --kv-cache-bytes (per rank); wins over the fraction
  std::optional<uint64_t> kv_budget_bytes;  // a GPU backend's KV budget (device_kv_budget)
  std::string kv_budget_source;             // where the budget came from, for the plan's wording
  // With the pool sized from the device: no more pages than max_num_seqs sequences of the longest
  // allowed length can use (0: no cap). An explicit --kv-cache-bytes is never capped.
  int64_t max_num_seqs = 0;
  uint64_t default_kv_cache_bytes = 256ull << 20;  // CPU default when neither applies
  uint64_t bytes_per_token = 0;                    // KvCache::bytes_per_token for this model/dtype
  int64_t page_size = 64;                          // positions of a page in one rank's storage
  // Ranks a token's KV is spread over (a cache sharded by position, model/kv_shard.h): the pool's
  // bytes are each rank's, and a page of page_size x kv_shards positions takes page_size x
  // bytes_per_token on every rank, so the same bytes hold kv_shards times the tokens.
  int64_t kv_shards = 1;
  int64_t max_position_embeddings = 0;
  std::string max_model_len = "auto";  // --max-model-len: "auto" or a number of tokens
};

struct MemoryPlan {
  uint64_t kv_bytes = 0;
  std::string kv_bytes_source;  // "--kv-cache-bytes", the device budget's source, "default"
  int64_t num_pages = 0;
  int64_t page_tokens = 0;     // positions a page covers (page_size x kv_shards)
  int64_t token_capacity = 0;  // num_pages * page_tokens
  int64_t max_model_len = 0;
  std::string max_model_len_source;
  std::string describe() const;
};

// What a device's memory holds besides the KV pool, in the order it is taken.
struct DeviceMemoryUse {
  uint64_t total = 0;        // the device's memory
  uint64_t in_use = 0;       // in use when planning (total - free): this process's CUDA context and libraries,
                             // and whatever other processes hold
  uint64_t weights = 0;      // the backend's count of its weights
  uint64_t workspace = 0;    // a full step's activations (activation_workspace_bytes)
  uint64_t runtime = 0;      // what the runtime adds after planning outside the backend's allocations
  uint64_t collectives = 0;  // the ranks' collectives (NCCL's buffers, the one-shot slots), with several ranks
  uint64_t tables = 0;       // the backend's kernel tables, made at a layer's first step (BackendPlan::table_bytes)
};

// Bytes a device can give the KV cache under --gpu-memory-utilization u: u x total - everything
// else in `use`, so that the whole process (and any other on the device) stays within u of the
// device's memory. Throws naming the flag and the numbers when nothing is left.
uint64_t device_kv_budget(const DeviceMemoryUse& use, double utilization);

// "2GiB", "512MiB", "1.5G", "1000000" (bytes). Throws core::Error naming `flag` on anything else.
uint64_t parse_bytes(const std::string& text, const std::string& flag = "--kv-cache-bytes");

// Throws core::Error when the pool holds no page or an explicit max_model_len cannot fit.
MemoryPlan plan_memory(const MemoryPlanInput& in);

}  // namespace tessera::engine
