#include "ops/comm/in_process.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::ops {

namespace {

void check_f32(const core::Tensor& t, const char* what) {
  TESSERA_CHECK(t.dtype() == core::DType::kF32, "in-process communicator: {} must be fp32, not {}", what,
                core::dtype_name(t.dtype()));
}

// A rank's buffer as host values: the tensor's own memory on the CPU, else a copy through its
// backend (which waits for the rank's queued work).
struct HostView {
  std::vector<float> copy;
  const float* data = nullptr;
};
HostView host_view(Ops& ops, const core::Tensor& t) {
  HostView v;
  if (t.device() == core::Device::kCpu) {
    v.data = t.data<float>();
  } else {
    v.copy = ops.to_host_f32(t);
    v.data = v.copy.data();
  }
  return v;
}

// x takes `values`: in place on the CPU; on a device, a new tensor of the rank's backend replaces
// x's handle (the model passes its buffers by reference for this).
void store(Ops& ops, core::Tensor& x, const std::vector<float>& values) {
  if (x.device() == core::Device::kCpu)
    std::copy(values.begin(), values.end(), x.data<float>());
  else
    x = ops.from_host_f32(x.shape(), values.data());
}

}  // namespace

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }

  void all_reduce_sum(Ops& ops, core::Tensor& x) override {
    check_f32(x, "all_reduce_sum's tensor");
    const HostView mine = host_view(ops, x);
    publish(x, mine.data);
    const int64_t n = x.numel();
    for (const auto& s : g_.slots_)
      TESSERA_CHECK(s.tensor->numel() == n, "all_reduce_sum: ranks passed {} and {} values", s.tensor->numel(), n);
    // Every rank sums in rank order: the same bits everywhere.
    std::vector<float> sum(g_.slots_[0].data, g_.slots_[0].data + n);
    for (size_t r = 1; r < g_.slots_.size(); ++r) {
      const float* p = g_.slots_[r].data;
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += p[i];
    }
    g_.arrive_and_wait();  // every rank has read every buffer: now they may change
    store(ops, x, sum);
  }

  void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) override {
    check_f32(part, "all_gather_cols' part");
    check_f32(out, "all_gather_cols' output");
    const HostView mine = host_view(ops, part);
    publish(part, mine.data);
    const int64_t rows = part.dim(0), cols = out.dim(1);
    std::vector<float> all(static_cast<size_t>(rows * cols));
    int64_t col = 0;
    for (const auto& s : g_.slots_) {
      const core::Tensor& t = *s.tensor;
      TESSERA_CHECK(t.rank() == 2 && t.dim(0) == rows && col + t.dim(1) <= cols,
                    "all_gather_cols: the parts [{} x ...] do not fill the output [{} x {}]", t.dim(0), rows, cols);
      const int64_t c = t.dim(1);
      for (int64_t r = 0; r < rows; ++r) std::copy_n(s.data + r * c, c, all.data() + r * cols + col);
      col += c;
    }
    TESSERA_CHECK(col == cols, "all_gather_cols: the parts have {} columns, the output {}", col, cols);
    g_.arrive_and_wait();
    store(ops, out, all);
  }

  void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) override {
    check_f32(x, "reduce_scatter_cols' input");
    check_f32(out, "reduce_scatter_cols' output");
    const HostView mine = host_view(ops, x);
    publish(x, mine.data);
    const int64_t rows = x.dim(0), total = x.numel() / std::max<int64_t>(rows, 1);
    const auto [first, count] = balanced_cols(total, g_.size(), rank_);
    TESSERA_CHECK(out.numel() == rows * count, "reduce_scatter_cols: rank {} of {} gets {} of {} columns, not {}",
                  rank_, g_.size(), count, total, core::shape_str(out.shape()));
    for (const auto& s : g_.slots_)
      TESSERA_CHECK(s.tensor->numel() == x.numel(), "reduce_scatter_cols: ranks passed {} and {} values",
                    s.tensor->numel(), x.numel());
    // In rank order, as all_reduce_sum.
    std::vector<float> sum(static_cast<size_t>(rows * count), 0.0f);
    for (const auto& s : g_.slots_)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < count; ++c) sum[static_cast<size_t>(r * count + c)] += s.data[r * total + first + c];
    g_.arrive_and_wait();
    store(ops, out, sum);
  }

 private:
  // Shows this rank's buffer to the others and waits for theirs.
  void publish(const core::Tensor& t, const float* data) {
    g_.slots_[static_cast<size_t>(rank_)] = {&t, data};
    g_.arrive_and_wait();
  }

  InProcessGroup& g_;
  const int rank_;
};

InProcessGroup::InProcessGroup(int size) : size_(size), slots_(static_cast<size_t>(size)) {
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
