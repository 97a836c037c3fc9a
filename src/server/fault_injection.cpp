#include "server/fault_injection.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::server {
namespace {

class FailingModel final : public model::Model {
 public:
  FailingModel(std::unique_ptr<model::Model> inner, int32_t fail_token) : inner_(std::move(inner)), fail_(fail_token) {}
  const io::ModelConfig& config() const override { return inner_->config(); }
  ops::Ops& ops() override { return inner_->ops(); }
  core::Tensor forward(const model::StepBatch& batch, model::KvCache& cache) override {
    if (std::find(batch.token_ids.begin(), batch.token_ids.end(), fail_) != batch.token_ids.end())
      core::fail("injected forward failure (--test-fail-token {})", fail_);
    return inner_->forward(batch, cache);
  }
  uint64_t parameter_count() const override { return inner_->parameter_count(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }

 private:
  std::unique_ptr<model::Model> inner_;
  int32_t fail_;
};

}  // namespace

std::unique_ptr<model::Model> make_failing_model(std::unique_ptr<model::Model> inner, int32_t fail_token) {
  return std::make_unique<FailingModel>(std::move(inner), fail_token);
}

}  // namespace tessera::server
