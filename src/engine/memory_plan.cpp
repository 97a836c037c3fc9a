#include "engine/memory_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace tessera::engine {

uint64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  std::string unit = text.substr(i);
  std::erase(unit, ' ');
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (i == 0 || ec != std::errc() || ptr != text.data() + i)
    core::fail("{}: expected a size such as 2GiB, 512MiB or 1000000, got '{}'", flag, text);
  double mul = 1;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kb")
    mul = 1e3;
  else if (unit == "m" || unit == "mb")
    mul = 1e6;
  else if (unit == "g" || unit == "gb")
    mul = 1e9;
  else if (unit == "t" || unit == "tb")
    mul = 1e12;
  else if (unit == "kib")
    mul = 1024.0;
  else if (unit == "mib")
    mul = 1024.0 * 1024;
  else if (unit == "gib")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else
    core::fail("{}: unknown unit '{}' in '{}' (use B, KB, MB, GB, KiB, MiB, GiB)", flag, unit, text);
  return static_cast<uint64_t>(std::floor(value * mul));
}

uint64_t device_kv_budget(const DeviceMemoryUse& use, double utilization) {
  TESSERA_CHECK(utilization > 0.0 && utilization <= 1.0, "--gpu-memory-utilization {} is not in (0, 1]", utilization);
  const double usable = utilization * static_cast<double>(use.total);
  const double taken =
      static_cast<double>(use.in_use + use.weights + use.workspace + use.runtime + use.collectives + use.tables);
  constexpr double kGiB = 1 << 30;
  TESSERA_CHECK(
      usable > taken,
      "--gpu-memory-utilization {:.2f}: {:.2f} GiB of the device's {:.2f} GiB are usable, but {:.2f} GiB are "
      "in use already (CUDA context, other processes), the weights need {:.2f} GiB, a step's activations "
      "{:.2f} GiB, the runtime {:.2f} GiB, the collectives {:.2f} GiB and the kernel tables {:.2f} GiB, which "
      "leaves nothing for the KV cache; raise --gpu-memory-utilization, lower --max-num-batched-tokens or use more "
      "GPUs",
      utilization, usable / kGiB, static_cast<double>(use.total) / kGiB, static_cast<double>(use.in_use) / kGiB,
      static_cast<double>(use.weights) / kGiB, static_cast<double>(use.workspace) / kGiB,
      static_cast<double>(use.runtime) / kGiB, static_cast<double>(use.collectives) / kGiB,
      static_cast<double>(use.tables) / kGiB);
  return static_cast<uint64_t>(usable - taken);
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  TESSERA_CHECK(in.bytes_per_token > 0 && in.page_size > 0 && in.kv_shards >= 1,
                "memory plan: bytes per token, page size and KV shards must be set");
  // Token counts go by the positions a page covers; bytes by what a rank stores of it.
  const int64_t page_tokens = in.page_size * in.kv_shards;
  MemoryPlan plan;
  if (in.kv_cache_bytes) {
    plan.kv_bytes = *in.kv_cache_bytes;
    plan.kv_bytes_source = "--kv-cache-bytes";
  } else if (in.kv_budget_bytes) {
    plan.kv_bytes = *in.kv_budget_bytes;
    plan.kv_bytes_source = !in.kv_budget_source.empty() ? in.kv_budget_source : "the device budget";
    const int64_t longest = in.max_model_len.empty() || in.max_model_len == "auto"
                                ? in.max_position_embeddings
                                : std::strtoll(in.max_model_len.c_str(), nullptr, 10);
    if (in.max_num_seqs > 0 && longest > 0) {
      const uint64_t pages_per_seq = static_cast<uint64_t>((longest + page_tokens - 1) / page_tokens);
      const uint64_t cap = static_cast<uint64_t>(in.max_num_seqs) * pages_per_seq * in.bytes_per_token *
                           static_cast<uint64_t>(in.page_size);
      if (plan.kv_bytes > cap) {
        plan.kv_bytes = cap;
        plan.kv_bytes_source +=
            fmt::format("; capped at what {} sequences of {} tokens can use", in.max_num_seqs, longest);
      }
    }
  } else {
    plan.kv_bytes = in.default_kv_cache_bytes;
    plan.kv_bytes_source = "default";
  }
  const uint64_t page_bytes = in.bytes_per_token * static_cast<uint64_t>(in.page_size);
  plan.num_pages = static_cast<int64_t>(plan.kv_bytes / page_bytes);
  TESSERA_CHECK(plan.num_pages > 0,
                "KV cache of {} bytes ({}) holds no page of {} tokens ({} bytes); raise --kv-cache-bytes",
                plan.kv_bytes, plan.kv_bytes_source, page_tokens, page_bytes);
  plan.page_tokens = page_tokens;
  plan.token_capacity = plan.num_pages * page_tokens;
  const int64_t model_max = in.max_position_embeddings > 0 ? in.max_position_embeddings : plan.token_capacity;
  if (in.max_model_len.empty() || in.max_model_len == "auto") {
    plan.max_model_len = std::min(plan.token_capacity, model_max);
    plan.max_model_len_source = plan.max_model_len == model_max ? "auto: the model's max_position_embeddings"
                                                                : "auto: one sequence filling the KV cache";
    spdlog::info("max model length {} tokens ({}; KV cache holds {} tokens, model allows {})", plan.max_model_len,
                 plan.max_model_len_source, plan.token_capacity, model_max);
  } else {
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(in.max_model_len.data(), in.max_model_len.data() + in.max_model_len.size(), v);
    TESSERA_CHECK(ec == std::errc() && ptr == in.max_model_len.data() + in.max_model_len.size() && v > 0,
                  "--max-model-len: expected 'auto' or a positive number of tokens, got '{}'", in.max_model_len);
    TESSERA_CHECK(v <= model_max, "--max-model-len {} exceeds the model's max_position_embeddings {}", v, model_max);
    TESSERA_CHECK(v <= plan.token_capacity,
                  "--max-model-len {} does not fit the KV cache: {} bytes hold {} tokens ({} pages of {}); raise "
                  "--kv-cache-bytes to at least {} bytes or lower --max-model-len",
                  v, plan.kv_bytes, plan.token_capacity, plan.num_pages, page_tokens,
                  static_cast<uint64_t>((v + page_tokens - 1) / page_tokens) * page_bytes);
    plan.max_model_len = v;
    plan.max_model_len_source = "--max-model-len";
  }
  return plan;
}

std::string MemoryPlan::describe() const {
  return fmt::format("KV cache {:.1f} MiB ({}): {} pages, {} tokens; max model length {} ({})",
                     static_cast<double>(kv_bytes) / (1024.0 * 1024.0), kv_bytes_source, num_pages, token_capacity,
                     max_model_len, max_model_len_source);
}

}  // namespace tessera::engine
