#include "ops/comm/size_routed.h"

#include <utility>

#include "core/error.h"

namespace tessera::ops {

namespace {

class SizeRoutedCommunicator final : public Communicator {
 public:
  SizeRoutedCommunicator(std::unique_ptr<Communicator> small, std::unique_ptr<Communicator> large, uint64_t limit)
      : small_(std::move(small)), large_(std::move(large)), limit_(limit) {}
  int rank() const override { return large_->rank(); }
  int size() const override { return large_->size(); }
  void all_reduce_sum(Ops& ops, core::Tensor& x) override { by(x.nbytes()).all_reduce_sum(ops, x); }
  void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) override {
    by(out.nbytes()).all_gather_cols(ops, part, out);
  }
  void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) override {
    by(x.nbytes()).reduce_scatter_cols(ops, x, out);
  }

 private:
  Communicator& by(uint64_t bytes) { return bytes <= limit_ && limit_ > 0 ? *small_ : *large_; }

  std::unique_ptr<Communicator> small_, large_;
  uint64_t limit_;
};

}  // namespace

SizeRoutedGroup::SizeRoutedGroup(std::unique_ptr<CommGroup> small, std::unique_ptr<CommGroup> large,
                                 CollectiveChoice choice)
    : small_(std::move(small)), large_(std::move(large)), choice_(std::move(choice)) {
  TESSERA_CHECK(large_ != nullptr, "a size-routed rank group needs a group for large messages");
  TESSERA_CHECK(small_ != nullptr || choice_.one_shot_max_bytes == 0,
                "a size-routed rank group sends messages up to {} bytes to a group it does not have",
                choice_.one_shot_max_bytes);
  TESSERA_CHECK(small_ == nullptr || small_->size() == large_->size(), "a size-routed rank group of {} and {} ranks",
                small_ ? small_->size() : 0, large_->size());
}

std::unique_ptr<Communicator> SizeRoutedGroup::communicator(int rank) {
  if (!small_) return large_->communicator(rank);
  return std::make_unique<SizeRoutedCommunicator>(small_->communicator(rank), large_->communicator(rank),
                                                  choice_.one_shot_max_bytes);
}

void SizeRoutedGroup::abort(const std::string& why) {
  if (small_) small_->abort(why);
  large_->abort(why);
}

}  // namespace tessera::ops
