#include "model/sequence_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace tessera::model {

SequenceRunner::SequenceRunner(LoadedModel& model, int64_t capacity)
    : model_(model), cache_(model.make_kv_cache(std::max<int64_t>(1, pages_for_tokens(capacity)))) {
  block_table_.resize(static_cast<size_t>(cache_.num_pages()));
  std::iota(block_table_.begin(), block_table_.end(), 0);
}

std::vector<float> SequenceRunner::append(const std::vector<int32_t>& ids, bool all_logits) {
  TESSERA_CHECK(!ids.empty(), "append: no tokens");
  const int64_t need = length_ + static_cast<int64_t>(ids.size());
  TESSERA_CHECK(need <= cache_.num_pages() * cache_.page_size(), "sequence of {} tokens exceeds its cache of {}",
                need, cache_.num_pages() * cache_.page_size());
  StepBatch batch;
  batch.token_ids = ids;
  SequenceStep s;
  s.start_pos = length_;
  s.num_tokens = static_cast<int64_t>(ids.size());
  s.block_table.assign(block_table_.begin(), block_table_.begin() + pages_for_tokens(need, cache_.page_size()));
  s.all_logits = all_logits;
  batch.seqs.push_back(std::move(s));
  core::Tensor logits = model_.model->forward(batch, cache_);
  length_ = need;
  return model_.model->ops().to_host_f32(logits);
}

std::vector<float> prompt_logits(LoadedModel& model, const std::vector<int32_t>& prompt) {
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()));
  return runner.append(prompt, /*all_logits=*/true);
}

namespace {

int32_t pick(const std::vector<float>& logits, float temperature, std::mt19937_64& rng) {
  if (temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += (p[i] = std::exp((logits[i] - m) / temperature));
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng), acc = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if ((acc += p[i]) >= r) return static_cast<int32_t>(i);
  return static_cast<int32_t>(p.size() - 1);
}

}  // namespace

GenerateResult generate(LoadedModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  TESSERA_CHECK(!prompt.empty(), "generate: the prompt is empty");
  TESSERA_CHECK(o.max_tokens >= 0, "generate: max_tokens must be >= 0");
  GenerateResult r;
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  TESSERA_CHECK(capacity <= model.config.max_position_embeddings,
                "prompt ({}) + max_tokens ({}) exceeds the model's max_position_embeddings {}", prompt.size(),
                o.max_tokens, model.config.max_position_embeddings);
  if (o.max_tokens == 0) return r;
  SequenceRunner runner(model, capacity);
  std::mt19937_64 rng(o.seed);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  const size_t chunk = o.prefill_chunk > 0 ? static_cast<size_t>(o.prefill_chunk) : prompt.size();
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    std::vector<int32_t> part(prompt.begin() + b, prompt.begin() + std::min(prompt.size(), b + chunk));
    logits = runner.append(part, false);
  }
  auto t1 = std::chrono::steady_clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    int32_t next = pick(logits, o.temperature, rng);
    r.tokens.push_back(next);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) {
      r.stopped = true;
      break;
    }
    if (i + 1 < o.max_tokens) logits = runner.append({next}, false);
  }
  r.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return r;
}

}  // namespace tessera::model
