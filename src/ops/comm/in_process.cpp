#include "ops/comm/in_process.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::ops {

namespace {

void check_host_f32(const core::Tensor& t, const char* what) {
  TESSERA_CHECK(t.device() == core::Device::kCpu && t.dtype() == core::DType::kF32,
                "in-process communicator: {} must be an fp32 CPU tensor (ranks on GPUs need the NCCL or peer "
                "communicator, not built yet)",
                what);
}

}  // namespace

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }

  void all_reduce_sum(Ops&, core::Tensor& x) override {
    check_host_f32(x, "all_reduce_sum's tensor");
    g_.slots_[static_cast<size_t>(rank_)] = &x;
    g_.arrive_and_wait();
    const int64_t n = x.numel();
    for (const core::Tensor* t : g_.slots_)
      TESSERA_CHECK(t->numel() == n, "all_reduce_sum: ranks passed {} and {} values", t->numel(), n);
    // Every rank sums in rank order: the same bits everywhere.
    std::vector<float> sum(g_.slots_[0]->data<float>(), g_.slots_[0]->data<float>() + n);
    for (size_t r = 1; r < g_.slots_.size(); ++r) {
      const float* p = g_.slots_[r]->data<float>();
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += p[i];
    }
    g_.arrive_and_wait();  // every rank has read every buffer: now they may change
    std::copy(sum.begin(), sum.end(), x.data<float>());
  }

  void all_gather_cols(Ops&, const core::Tensor& part, core::Tensor& out) override {
    check_host_f32(part, "all_gather_cols' part");
    check_host_f32(out, "all_gather_cols' output");
    g_.slots_[static_cast<size_t>(rank_)] = &part;
    g_.arrive_and_wait();
    const int64_t rows = part.dim(0), cols = out.dim(1);
    int64_t col = 0;
    for (const core::Tensor* t : g_.slots_) {
      TESSERA_CHECK(t->rank() == 2 && t->dim(0) == rows && col + t->dim(1) <= cols,
                    "all_gather_cols: the parts [{} x ...] do not fill the output [{} x {}]", t->dim(0), rows, cols);
      const int64_t c = t->dim(1);
      for (int64_t r = 0; r < rows; ++r) std::copy_n(t->data<float>() + r * c, c, out.data<float>() + r * cols + col);
      col += c;
    }
    TESSERA_CHECK(col == cols, "all_gather_cols: the parts have {} columns, the output {}", col, cols);
    g_.arrive_and_wait();
  }

 private:
  InProcessGroup& g_;
  const int rank_;
};

InProcessGroup::InProcessGroup(int size) : size_(size), slots_(static_cast<size_t>(size), nullptr) {
  TESSERA_CHECK(size >= 1, "in-process group: {} ranks", size);
}

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  TESSERA_CHECK(rank >= 0 && rank < size_, "in-process group: rank {} of {}", rank, size_);
  return std::make_unique<InProcessCommunicator>(*this, rank);
}

void InProcessGroup::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    why_ = why;
  }
  cv_.notify_all();
}

void InProcessGroup::arrive_and_wait() {
  std::unique_lock lock(mu_);
  auto failed = [&] { return core::Error(fmt::format("tensor-parallel group stopped: {}", why_)); };
  if (aborted_) throw failed();
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) throw failed();
}

}  // namespace tessera::ops
