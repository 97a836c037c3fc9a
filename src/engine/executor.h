// The seam between the engine and the devices (DESIGN.md "Many GPUs": Engine -> Executor -> Model).
// The engine schedules logical KV pages and samples; an executor runs a step's forward on its
// devices, each holding its share of the weights and of the KV pages. One device today
// (LocalExecutor); a multi-rank executor (a worker, Ops and KV shard per GPU, stepped in lockstep)
// lands behind the same interface without touching the scheduler or the engine.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "io/model_config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step_batch.h"
#include "ops/ops.h"

namespace tessera::engine {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const io::ModelConfig& config() const = 0;
  // The KV pages every rank holds (the engine's BlockManager hands out their ids) and their size.
  virtual int64_t num_pages() const = 0;
  virtual int64_t page_size() const = 0;
  // One step over `batch`: logits [batch.num_logits_rows(), vocab] on sampling_ops()'s device.
  virtual core::Tensor execute(const model::StepBatch& batch) = 0;
  // The backend that holds execute's logits and samples from them.
  virtual ops::Ops& sampling_ops() = 0;
};

// One model on one device, with its KV cache.
class LocalExecutor final : public Executor {
 public:
  LocalExecutor(model::Model& model, model::KvCache cache) : model_(model), cache_(std::move(cache)) {}
  const io::ModelConfig& config() const override { return model_.config(); }
  int64_t num_pages() const override { return cache_.num_pages(); }
  int64_t page_size() const override { return cache_.page_size(); }
  core::Tensor execute(const model::StepBatch& batch) override { return model_.forward(batch, cache_); }
  ops::Ops& sampling_ops() override { return model_.ops(); }

 private:
  model::Model& model_;
  model::KvCache cache_;
};

}  // namespace tessera::engine
