#include "model/deepseek_v3.h"

#include <cmath>
#include <optional>

#include "core/error.h"
#include "model/weight_staging.h"

namespace tessera::model {

using core::Tensor;

DeepseekV3Model::DeepseekV3Model(io::ModelConfig config, ModelWeights weights, std::unique_ptr<ops::Ops> ops,
                                 WeightStaging* staging, TensorParallel tp, ops::Communicator* comm)
    : cfg_(std::move(config)), w_(std::move(weights)), ops_(std::move(ops)), tp_(tp), comm_(comm) {
  TESSERA_CHECK(tp_.size == 1 || (comm_ && comm_->size() == tp_.size && comm_->rank() == tp_.rank),
                "model: rank {} of {} needs the group's communicator", tp_.rank, tp_.size);
  const auto [h0, h1] = tp_.range(cfg_.num_attention_heads);
  local_heads_ = h1 - h0;
  inv_freq_ = cfg_.rope_inv_freq();
  rope_factor_ = static_cast<float>(cfg_.rope_attention_factor());
  // Counted on the checkpoint's tensors, before the backend converts them.
  parameter_count_ = count_parameters();
  weight_bytes_ = count_weight_bytes();
  upload_weights(staging);
}

void DeepseekV3Model::upload_weights(WeightStaging* staging) {
  auto& o = *ops_;
  if (!staging) {
    visit_weights(
        w_, [&](Tensor& t) { t = o.upload_table(t); }, [&](Tensor& t) { t = o.upload_vector(t); },
        [&](ops::LinearWeight& l, ops::LinearUse use) { l = o.upload_linear(l, use); });
    return;
  }
  // The staged bytes are valid while `Held` lives: until the upload call has returned.
  visit_weights(
      w_, [&](Tensor& t) { t = o.upload_table(staging->take(t).view); },
      [&](Tensor& t) { t = o.upload_vector(staging->take(t).view); },
      [&](ops::LinearWeight& l, ops::LinearUse use) {
        WeightStaging::Held weight = staging->take(l.weight), scale = staging->take(l.scale);
        ops::LinearWeight staged = l;
        staged.weight = weight.view;
        staged.scale = scale.view;
        l = o.upload_linear(staged, use);
      });
}

ops::RopeTables DeepseekV3Model::rope_tables(ops::Ops& o, const StepBatch& batch) {
  // As transformers: angle = position · inv_freq in fp32, then cos/sin times the YaRN factor.
  const int64_t T = static_cast<int64_t>(batch.token_ids.size()), half = cfg_.qk_rope_head_dim / 2;
  std::vector<float> c(static_cast<size_t>(T * half)), s(static_cast<size_t>(T * half));
  int64_t row = 0;
  for (const auto& seq : batch.seqs)
    for (int64_t i = 0; i < seq.num_tokens; ++i, ++row) {
      const float pos = static_cast<float>(seq.start_pos + i);
      for (int64_t k = 0; k < half; ++k) {
        const float angle = pos * inv_freq_[k];
        c[row * half + k] = std::cos(angle) * rope_factor_;
        s[row * half + k] = std::sin(angle) * rope_factor_;
      }
    }
  return {o.from_host_f32({T, half}, c.data()), o.from_host_f32({T, half}, s.data())};
}

void DeepseekV3Model::attention(ops::Ops& o, int64_t layer, const Tensor& h, const ops::RopeTables& rope,
                                std::span<const ops::AttentionSeq> seqs, const ShardedStep* sharded, KvCache& cache,
                                Tensor& out) {
  const auto& A = w_.layers[static_cast<size_t>(layer)].attn;
  const int64_t T = h.dim(0), N = local_heads_, dq = cfg_.qk_head_dim();
  const int64_t Lkv = cfg_.kv_lora_rank, dr = cfg_.qk_rope_head_dim;
  // Query: q = (RMSNorm(h · Wq_aᵀ) · Wq_bᵀ) or h · Wqᵀ, per head [nope | rope].
  // Latent: [c_kv | k_pe] = h · Wkv_aᵀ; c_kv normalised, k_pe rotated; this is what is cached.
  Tensor q = o.empty({T, N * dq});
  Tensor kv = o.empty({T, Lkv + dr});
  if (A.q_a) {
    Tensor qa = o.empty({T, cfg_.q_lora_rank});
    o.linear_pair(h, *A.q_a, qa, A.kv_a, kv);
    o.rms_norm_linear(qa, A.q_a_norm, static_cast<float>(cfg_.latent_norm_eps), *A.q_b, q);
  } else {
    o.linear_pair(h, *A.q, q, A.kv_a, kv);
  }
  ops::MlaDims dims{N, cfg_.qk_nope_head_dim, dr, cfg_.v_head_dim, Lkv, static_cast<float>(cfg_.softmax_scale())};
  Tensor attn = o.empty({T, N * cfg_.v_head_dim});
  if (sharded) {
    sharded_attention(o, layer, q, kv, dims, rope, *sharded, cache, attn);
  } else {
    // q's rope rotated; kv normalised and rotated in place, then written to the cache.
    o.mla_prepare(q, kv, A.kv_a_norm, static_cast<float>(cfg_.latent_norm_eps), rope, dims, cache.layer(layer), seqs);
    o.mla_attention(q, cache.layer(layer), A.kv_b, dims, seqs, attn);
  }
  o.linear(attn, A.o, out);
  all_reduce(o, out);
}

void DeepseekV3Model::sharded_attention(ops::Ops& o, int64_t layer, Tensor& q, Tensor& kv, const ops::MlaDims& dims,
                                        const ops::RopeTables& rope, const ShardedStep& st, KvCache& cache,
                                        Tensor& out) {
  const auto& A = w_.layers[static_cast<size_t>(layer)].attn;
  const int64_t T = q.dim(0), H = cfg_.num_attention_heads, entry = dims.latent + dims.rope;
  ops::KvLayerView& kv_layer = cache.layer(layer);
  // q's rope rotated, kv normalised and rotated; only the rows this rank stores are written.
  o.mla_prepare(q, kv, A.kv_a_norm, static_cast<float>(cfg_.latent_norm_eps), rope, dims, kv_layer, st.writes);
  // Every head's absorbed query, attended over this rank's positions.
  Tensor q_mine = o.empty({T, dims.heads * entry}), q_all = o.empty({T, H * entry});
  o.mla_absorb_q(q, A.kv_b, dims, q_mine);
  comm_->all_gather_cols(o, q_mine, q_all);
  ops::MlaDims all = dims;
  all.heads = H;
  Tensor o_lat = o.empty({T, H * dims.latent}), lse = o.empty({T, H}), lse_all = o.empty({T, tp_.size * H});
  o.mla_attend_latent(q_all, kv_layer, all, st.attends, st.decode_step, o_lat, lse);
  // The ranks' partials, each weighed by its share of the softmax, summed for this rank's heads:
  // attention over all positions.
  comm_->all_gather_cols(o, lse, lse_all);
  o.mla_rank_weigh(o_lat, lse, lse_all);
  Tensor mine = o.empty({T, dims.heads * dims.latent});
  comm_->reduce_scatter_cols(o, o_lat, mine);
  o.mla_up_v(mine, 0, A.kv_b, dims, out);
}

void DeepseekV3Model::all_reduce(ops::Ops& o, Tensor& x) {
  if (comm_) comm_->all_reduce_sum(o, x);
}

void DeepseekV3Model::feed_forward(ops::Ops& o, int64_t layer, const Tensor& h, Tensor& out) {
  const auto& L = w_.layers[static_cast<size_t>(layer)];
  if (!L.is_moe) {
    o.mlp(h, L.dense_mlp, out);
    all_reduce(o, out);
    return;
  }
  const auto& M = L.moe;
  ops::RouterConfig rc{cfg_.n_routed_experts, cfg_.num_experts_per_tok, cfg_.n_group,
                       cfg_.topk_group,       cfg_.norm_topk_prob,      static_cast<float>(cfg_.routed_scaling_factor)};
  o.moe(h, M.router, M.correction_bias, rc, M.experts, M.shared ? &*M.shared : nullptr, out);
  all_reduce(o, out);
}

void DeepseekV3Model::step_sequences(const StepBatch& batch, const KvCache& cache, std::vector<ops::AttentionSeq>& seqs,
                                     std::vector<int64_t>& logit_rows) const {
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  TESSERA_CHECK(T > 0, "forward: empty step");
  TESSERA_CHECK(cache.num_layers() == cfg_.num_hidden_layers && cache.entry_dim() == cfg_.kv_cache_entry_dim(),
                "forward: KV cache shape does not match the model");
  const KvShard shard = cache.shard();
  TESSERA_CHECK(!shard.sharded() || (comm_ && shard.size == tp_.size && shard.rank == tp_.rank),
                "forward: a KV cache sharded as rank {} of {} on rank {} of {}", shard.rank, shard.size, tp_.rank,
                tp_.size);
  int64_t begin = 0;
  for (const auto& s : batch.seqs) {
    TESSERA_CHECK(s.num_tokens >= 1, "forward: a sequence with no new tokens");
    TESSERA_CHECK(s.start_pos + s.num_tokens <= cfg_.max_position_embeddings,
                  "forward: position {} exceeds max_position_embeddings {}", s.start_pos + s.num_tokens,
                  cfg_.max_position_embeddings);
    TESSERA_CHECK(static_cast<int64_t>(s.block_table.size()) * cache.page_size() >= s.start_pos + s.num_tokens,
                  "forward: block table of {} pages cannot hold {} tokens", s.block_table.size(),
                  s.start_pos + s.num_tokens);
    seqs.push_back({begin, s.num_tokens, s.start_pos, s.block_table});
    if (s.all_logits) {
      for (int64_t i = 0; i < s.num_tokens; ++i) logit_rows.push_back(begin + i);
    } else {
      logit_rows.push_back(begin + s.num_tokens - 1);
    }
    begin += s.num_tokens;
  }
  TESSERA_CHECK(begin == T, "forward: sequences cover {} tokens but the step has {}", begin, T);
}

Tensor DeepseekV3Model::forward(const StepBatch& batch, KvCache& cache) {
  std::vector<ops::AttentionSeq> seqs;
  std::vector<int64_t> logit_rows;
  step_sequences(batch, cache, seqs, logit_rows);
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  // A decode-only step issues the same ops for every step of its size: the backend may replay it
  // (CUDA graphs). Steps with prefill chunks vary in their ops and run as they are (key -1).
  const bool decode_only = static_cast<int64_t>(batch.seqs.size()) == T;
  return ops_->graphed_step(decode_only ? T : -1, [&] { return run_step(batch, seqs, logit_rows, cache); });
}

Tensor DeepseekV3Model::forward_layers(ops::Ops& o, const StepBatch& batch, KvCache& cache, int64_t layers,
                                       const LayerHook& before_layer) {
  TESSERA_CHECK(layers >= 0 && layers <= cfg_.num_hidden_layers, "forward_layers: {} of {} layers", layers,
                cfg_.num_hidden_layers);
  std::vector<ops::AttentionSeq> seqs;
  std::vector<int64_t> logit_rows;
  step_sequences(batch, cache, seqs, logit_rows);
  return run_layers(o, batch, seqs, cache, layers, before_layer);
}

Tensor DeepseekV3Model::run_layers(ops::Ops& o, const StepBatch& batch, std::span<const ops::AttentionSeq> seqs,
                                   KvCache& cache, int64_t layers, const LayerHook& before_layer) {
  const int64_t T = static_cast<int64_t>(batch.token_ids.size()), H = cfg_.hidden_size;
  if (before_layer) before_layer(0);
  ops::RopeTables rope = rope_tables(o, batch);
  Tensor x = o.empty({T, H});
  o.embedding(w_.embed, batch.token_ids, x);
  Tensor h = o.empty({T, H}), y = o.empty({T, H});
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  // Each residual add is fused with the norm that follows it (the next layer's input norm).
  if (cfg_.num_hidden_layers > 0) o.rms_norm(x, w_.layers[0].input_norm, eps, h);
  std::optional<ShardedStep> sharded;
  if (cache.shard().sharded()) sharded = shard_step(seqs, cache.stored_page_size(), cache.shard());
  // Step boundaries (Ops::step_boundary) after each attention and each MLP: where a backend
  // replaying a recorded step may start what it has checked so far. (Not after the embedding: its
  // few µs of GPU work would not cover the next part's check, and each boundary costs launches.)
  for (int64_t l = 0; l < layers; ++l) {
    const auto& L = w_.layers[static_cast<size_t>(l)];
    if (before_layer && l > 0) before_layer(l);
    attention(o, l, h, rope, seqs, sharded ? &*sharded : nullptr, cache, y);
    o.step_boundary();
    o.add_rms_norm(x, y, L.post_attention_norm, eps, h);
    feed_forward(o, l, h, y);
    if (l + 1 < cfg_.num_hidden_layers) {
      o.add_rms_norm(x, y, w_.layers[static_cast<size_t>(l + 1)].input_norm, eps, h);
    } else {
      o.add_inplace(x, y);
    }
    o.step_boundary();
  }
  return x;
}

Tensor DeepseekV3Model::run_step(const StepBatch& batch, std::span<const ops::AttentionSeq> seqs,
                                 std::span<const int64_t> logit_rows, KvCache& cache) {
  const int64_t H = cfg_.hidden_size;
  auto& o = *ops_;
  Tensor x = run_layers(o, batch, seqs, cache, cfg_.num_hidden_layers, {});
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor last = o.empty({static_cast<int64_t>(logit_rows.size()), H});
  o.gather_rows(x, logit_rows, last);
  Tensor normed = o.empty(last.shape());
  o.rms_norm(last, w_.final_norm, eps, normed);
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  Tensor logits = o.empty({rows, cfg_.vocab_size});
  if (!comm_) {
    o.linear(normed, w_.lm_head, logits);
    return logits;
  }
  // lm_head is split over the vocabulary: each rank's columns of the logits, gathered.
  Tensor part = o.empty({rows, w_.lm_head.out});
  o.linear(normed, w_.lm_head, part);
  comm_->all_gather_cols(o, part, logits);
  return logits;
}

// A tied lm_head shares the embedding's data: its parameters and bytes are counted once.
bool DeepseekV3Model::tied(const ops::LinearWeight& l) const {
  return &l == &w_.lm_head && w_.lm_head.weight.raw() == w_.embed.raw();
}

uint64_t DeepseekV3Model::count_parameters() const {
  uint64_t n = 0;
  auto tensor = [&](const Tensor& t) { n += static_cast<uint64_t>(t.numel()); };
  visit_weights(w_, tensor, tensor, [&](const ops::LinearWeight& l, ops::LinearUse) {
    if (!tied(l)) n += static_cast<uint64_t>(l.out * l.in);
  });
  return n;
}

uint64_t DeepseekV3Model::count_weight_bytes() const {
  uint64_t n = 0;
  auto tensor = [&](const Tensor& t) { n += t.nbytes(); };
  visit_weights(w_, tensor, tensor, [&](const ops::LinearWeight& l, ops::LinearUse) {
    if (!tied(l)) n += l.stored_bytes();
  });
  return n;
}

}  // namespace tessera::model
