// DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi-K2, the text model of Kimi-K2.5), written once
// against the ops contract: MLA attention over the paged latent cache, MoE with a sigmoid router
// and shared experts, dense MLP layers, YaRN RoPE. Spec: shared/reference/deepseek_v3_spec.md.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/deepseek_v3_weights.h"
#include "model/kv_shard.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "ops/comm/communicator.h"

namespace tessera::model {

class WeightStaging;

class DeepseekV3Model final : public Model {
 public:
  // Uploads the weights to `ops`; through `staging` when given (the checkpoint's bytes read ahead
  // into host memory, see weight_staging.h), else from the views in `weights`.
  // With tp.size > 1, `weights` is rank tp.rank's share (shard_weights) and `comm` joins the ranks:
  // the forward all-reduces after o_proj and after each MoE / MLP and all-gathers the logits.
  DeepseekV3Model(io::ModelConfig config, ModelWeights weights, std::unique_ptr<ops::Ops> ops,
                  WeightStaging* staging = nullptr, TensorParallel tp = {}, ops::Communicator* comm = nullptr);
  const io::ModelConfig& config() const override { return cfg_; }
  ops::Ops& ops() override { return *ops_; }
  core::Tensor forward(const StepBatch& batch, KvCache& cache) override;
  uint64_t parameter_count() const override { return parameter_count_; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  const ModelWeights& weights() const { return w_; }

  // The start-up self-check's step (model/self_check.h): `batch` through the embedding and layers
  // [0, layers) only, every op issued on `ops` (a decorator over this model's backend that checks
  // each op against the CPU reference) and run eagerly (no graphed step). `before_layer(l)` is
  // called before layer l's ops; the embedding and the first input norm count as layer 0's.
  // Returns the residual stream [T, hidden] after those layers.
  using LayerHook = std::function<void(int64_t layer)>;
  core::Tensor forward_layers(ops::Ops& ops, const StepBatch& batch, KvCache& cache, int64_t layers,
                              const LayerHook& before_layer);

 private:
  // `sharded`: this rank's part of the step when the cache is sharded by position (else null).
  void attention(ops::Ops& o, int64_t layer, const core::Tensor& h, const ops::RopeTables& rope,
                 std::span<const ops::AttentionSeq> seqs, const ShardedStep* sharded, KvCache& cache,
                 core::Tensor& out);
  // MLA over a cache sharded by position (kv_shard.h): q and kv as attention() computed them (q's
  // rope not yet rotated, kv not yet normalised); out [T, this rank's heads x v].
  void sharded_attention(ops::Ops& o, int64_t layer, core::Tensor& q, core::Tensor& kv, const ops::MlaDims& dims,
                         const ops::RopeTables& rope, const ShardedStep& st, KvCache& cache, core::Tensor& out);
  void feed_forward(ops::Ops& o, int64_t layer, const core::Tensor& h, core::Tensor& out);
  // The attention sequences of `batch` (checked against the cache) and the rows whose logits it wants.
  void step_sequences(const StepBatch& batch, const KvCache& cache, std::vector<ops::AttentionSeq>& seqs,
                      std::vector<int64_t>& logit_rows) const;
  // The embedding and layers [0, layers) on `o`: the residual stream after them.
  core::Tensor run_layers(ops::Ops& o, const StepBatch& batch, std::span<const ops::AttentionSeq> seqs, KvCache& cache,
                          int64_t layers, const LayerHook& before_layer);
  // The ops of a checked step: embedding, the layers, the final norm and lm_head.
  core::Tensor run_step(const StepBatch& batch, std::span<const ops::AttentionSeq> seqs,
                        std::span<const int64_t> logit_rows, KvCache& cache);
  ops::RopeTables rope_tables(ops::Ops& o, const StepBatch& batch);
  // Hands every weight to the backend once (it may move or convert them).
  void upload_weights(WeightStaging* staging);
  uint64_t count_parameters() const;
  uint64_t count_weight_bytes() const;
  bool tied(const ops::LinearWeight& l) const;

  // Sums the ranks' partial x (a no-op on one rank).
  void all_reduce(ops::Ops& o, core::Tensor& x);

  io::ModelConfig cfg_;
  ModelWeights w_;
  std::unique_ptr<ops::Ops> ops_;
  TensorParallel tp_;
  ops::Communicator* comm_ = nullptr;
  int64_t local_heads_ = 0;  // attention heads of this rank
  std::vector<float> inv_freq_;
  float rope_factor_;
  uint64_t parameter_count_ = 0, weight_bytes_ = 0;
};

}  // namespace tessera::model
