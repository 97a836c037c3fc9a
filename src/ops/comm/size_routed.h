// Ranks joined twice, each collective sent by its message size (issue 17): messages up to the
// choice's one_shot_max_bytes through the `small` group (the one-shot kernels over peer memory),
// the others through `large` (NCCL). Every rank routes a given call the same way, since the ranks
// call the same collectives with the same shapes in the same order, and each group sees its calls
// in that same order.
#pragma once

#include <memory>
#include <string>

#include "ops/comm/collective_choice.h"
#include "ops/comm/communicator.h"

namespace tessera::ops {

class SizeRoutedGroup final : public CommGroup {
 public:
  SizeRoutedGroup(std::unique_ptr<CommGroup> small, std::unique_ptr<CommGroup> large, CollectiveChoice choice);
  int size() const override { return large_->size(); }
  std::unique_ptr<Communicator> communicator(int rank) override;
  // Aborts both groups.
  void abort(const std::string& why) override;
  const CollectiveChoice& choice() const { return choice_; }

 private:
  std::unique_ptr<CommGroup> small_, large_;
  CollectiveChoice choice_;
};

}  // namespace tessera::ops
