#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace tessera::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t first_argmax(std::span<const float> x) {
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

// Token ids ordered by logit, descending; ties by id so the order never depends on the sort.
std::vector<int32_t> order_desc(std::span<const float> x) {
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return x[static_cast<size_t>(a)] > x[static_cast<size_t>(b)]; });
  return idx;
}

}  // namespace

void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated) {
  const auto V = static_cast<int32_t>(logits.size());
  auto valid = [&](int32_t t) { return t >= 0 && t < V; };
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (auto span : {prompt, generated})
      for (int32_t t : span)
        if (valid(t)) seen[static_cast<size_t>(t)] = true;
    for (size_t i = 0; i < logits.size(); ++i)
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t t : generated)
      if (valid(t)) ++counts[t];
    for (const auto& [t, c] : counts)
      logits[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
}

void apply_logit_bias(std::span<float> logits, const SamplingParams& p) {
  for (const auto& [t, bias] : p.logit_bias)
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[static_cast<size_t>(t)] += bias;
}

void mask_tokens(std::span<float> logits, std::span<const int32_t> ids) {
  for (int32_t t : ids)
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[static_cast<size_t>(t)] = kNegInf;
}

void mask_disallowed(std::span<float> logits, std::span<const uint32_t> allowed) {
  for (size_t i = 0; i < logits.size(); ++i) {
    const size_t w = i / 32;
    if (w >= allowed.size() || !((allowed[w] >> (i % 32)) & 1u)) logits[i] = kNegInf;
  }
}

void log_softmax(std::span<float> x) {
  const float m = *std::max_element(x.begin(), x.end());
  if (m == kNegInf) return;
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - m);
  const auto lse = static_cast<float>(m + std::log(sum));
  for (float& v : x) v = v == kNegInf ? kNegInf : v - lse;
}

void apply_truncation(std::span<float> x, const SamplingParams& p) {
  const bool use_min_p = p.min_p > 0.0f, use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < x.size(),
             use_top_p = p.top_p < 1.0f;
  if (!use_min_p && !use_top_k && !use_top_p) return;
  const float m = *std::max_element(x.begin(), x.end());
  if (use_min_p) {
    // p_i >= min_p * p_max  <=>  x_i >= x_max + log(min_p)
    const float threshold = m + std::log(p.min_p);
    for (float& v : x)
      if (v < threshold) v = kNegInf;
  }
  if (!use_top_k && !use_top_p) return;
  const auto order = order_desc(x);
  size_t keep = x.size();
  if (use_top_k) keep = static_cast<size_t>(p.top_k);
  if (use_top_p) {
    std::vector<double> probs(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i)
      sum += (probs[i] = std::exp(static_cast<double>(x[static_cast<size_t>(order[i])]) - m));
    double acc = 0;
    size_t n = 0;
    while (n < keep) {
      acc += probs[n++] / sum;
      if (acc >= static_cast<double>(p.top_p)) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  for (size_t i = keep; i < order.size(); ++i) x[static_cast<size_t>(order[i])] = kNegInf;
}

SampledToken sample_token(std::span<const float> raw, const SamplingParams& p, const SampleContext& ctx, Rng& rng) {
  std::vector<float> x(raw.begin(), raw.end());
  apply_penalties(x, p, ctx.prompt, ctx.generated);
  apply_logit_bias(x, p);
  if (!ctx.allowed.empty()) mask_disallowed(x, ctx.allowed);
  if (ctx.allowed.empty() || ctx.forced >= 0) {
    mask_tokens(x, ctx.masked);
  } else {
    // min_tokens must not leave a constrained row without a token (e.g. only EOS is allowed once the
    // JSON is complete): then the constraint's set is drawn from as it is.
    std::vector<float> kept = x;
    mask_tokens(x, ctx.masked);
    if (std::none_of(x.begin(), x.end(), [](float v) { return v != kNegInf; })) x.swap(kept);
  }
  SampledToken out;
  const bool greedy = p.temperature <= 0.0f;
  if (!greedy) {
    const float inv_t = 1.0f / p.temperature;
    for (float& v : x) v *= inv_t;
    apply_truncation(x, p);
  }
  if (ctx.forced >= 0) {
    out.token = ctx.forced;
    out.forced = true;
  } else if (greedy) {
    out.token = first_argmax(x);
  } else {
    const float m = *std::max_element(x.begin(), x.end());
    std::vector<double> w(x.size());
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i)
      sum += (w[i] = x[i] == kNegInf ? 0.0 : std::exp(static_cast<double>(x[i]) - m));
    const double r = rng.uniform() * sum;
    double acc = 0;
    out.token = first_argmax(x);  // fallback against rounding at the top end
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0.0) continue;
      acc += w[i];
      if (r < acc) {
        out.token = static_cast<int32_t>(i);
        break;
      }
    }
  }
  if (p.logprobs) {
    log_softmax(x);
    out.logprob = x[static_cast<size_t>(out.token)];
    const auto k = std::min<size_t>(static_cast<size_t>(std::max<int64_t>(*p.logprobs, 0)), x.size());
    if (k > 0) {
      std::vector<int32_t> idx(x.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(), [&](int32_t a, int32_t b) {
        const float va = x[static_cast<size_t>(a)], vb = x[static_cast<size_t>(b)];
        return va != vb ? va > vb : a < b;
      });
      for (size_t i = 0; i < k; ++i)
        if (x[static_cast<size_t>(idx[i])] != kNegInf) out.top.push_back({idx[i], x[static_cast<size_t>(idx[i])]});
    }
  }
  return out;
}

bool op_can_sample(const SamplingParams& p, const SampleContext& ctx, int64_t vocab) {
  const bool penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
  const bool alternatives = p.logprobs && *p.logprobs > 0;
  const bool temperature_ok = p.temperature == 0.0f || (p.temperature > 0.0f && std::isfinite(p.temperature) &&
                                                        std::isfinite(1.0f / p.temperature));
  return !penalties && !alternatives && temperature_ok && p.logit_bias.empty() && ctx.masked.empty() &&
         ctx.forced < 0 && p.min_p <= 0.0f && p.top_p > 0.0f && p.top_p <= 1.0f && vocab >= 1 &&
         vocab <= ops::sampling::kMaxVocab;
}

ops::SampleRow op_sample_row(const SamplingParams& p, Rng& rng) {
  ops::SampleRow row;
  row.temperature = p.temperature;
  // top_k beyond int32 is off, as is anything >= the vocabulary.
  row.top_k = p.top_k > 0 && p.top_k <= std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(p.top_k) : 0;
  row.top_p = p.top_p;
  row.uniform = p.temperature > 0.0f ? rng.uniform() : 0.0;
  return row;
}

}  // namespace tessera::engine
