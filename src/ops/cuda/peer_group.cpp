#include "ops/cuda/peer_group.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <utility>

#include "core/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels/comm/peer.h"
#include "ops/cuda/runtime/context.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

static_assert(PeerGroup::kMaxRanks == kPeerMaxRanks);

struct PeerGroup::Rank {
  float* buffers = nullptr;  // two halves of a slot per rank (kernels/comm/peer.h)
  PeerSignals* signals = nullptr;
};

namespace {

void check_f32(const core::Tensor& t, const char* what) {
  TESSERA_CHECK(t.dtype() == core::DType::kF32, "one-shot collectives: {} must be fp32, not {}", what,
                core::dtype_name(t.dtype()));
}

// The current device of this thread, restored when the scope ends (the constructor visits each
// rank's device from the caller's thread).
class DeviceScope {
 public:
  DeviceScope() { TESSERA_CUDA_CHECK(cudaGetDevice(&saved_)); }
  ~DeviceScope() { (void)cudaSetDevice(saved_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_ = 0;
};

class PeerCommunicator final : public Communicator {
 public:
  PeerCommunicator(const PeerGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  void all_reduce_sum(Ops& ops, core::Tensor& x) override {
    check_f32(x, "all_reduce_sum's tensor");
    group_.all_reduce_sum(rank_, x.data<float>(), x.numel(), backend_stream(ops));
  }

  void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) override {
    check_f32(part, "all_gather_cols' part");
    check_f32(out, "all_gather_cols' output");
    TESSERA_CHECK(part.rank() == 2 && out.rank() == 2 && part.dim(0) == out.dim(0),
                  "one-shot all-gather: part {} and out {} must be [rows, cols] of the same rows",
                  core::shape_str(part.shape()), core::shape_str(out.shape()));
    const int64_t total = out.dim(1);
    const auto [first, count] = balanced_cols(total, size(), rank_);
    (void)first;
    TESSERA_CHECK(part.dim(1) == count,
                  "one-shot all-gather: rank {} of {} holds {} of {} columns where the balanced split gives it {}",
                  rank_, size(), part.dim(1), total, count);
    group_.all_gather_cols(rank_, part.data<float>(), out.dim(0), total, out.data<float>(), backend_stream(ops));
  }

  void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) override {
    check_f32(x, "reduce_scatter_cols' tensor");
    check_f32(out, "reduce_scatter_cols' output");
    TESSERA_CHECK(x.rank() == 2, "one-shot reduce-scatter: x {} must be [rows, total]", core::shape_str(x.shape()));
    const int64_t rows = x.dim(0), total = x.dim(1);
    const auto [first, count] = balanced_cols(total, size(), rank_);
    (void)first;
    TESSERA_CHECK(out.numel() == rows * count, "one-shot reduce-scatter: rank {} of {} gets {} of {} columns, not {}",
                  rank_, size(), count, total, core::shape_str(out.shape()));
    group_.reduce_scatter_cols(rank_, x.data<float>(), rows, total, out.data<float>(), backend_stream(ops));
  }

 private:
  const PeerGroup& group_;
  int rank_;
};

}  // namespace

std::string PeerGroup::unreachable(const std::vector<int>& devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      TESSERA_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) return fmt::format("GPU {} cannot reach GPU {}'s memory (no peer-to-peer access)", a, b);
    }
  return "";
}

PeerGroup::PeerGroup(std::vector<int> devices, uint64_t capacity_bytes, std::chrono::nanoseconds timeout)
    : devices_(std::move(devices)), capacity_bytes_(capacity_bytes / 16 * 16), timeout_(timeout) {
  TESSERA_CHECK(!devices_.empty() && devices_.size() <= static_cast<size_t>(kPeerMaxRanks),
                "one-shot collectives: {} ranks, between 1 and {}", devices_.size(), kPeerMaxRanks);
  TESSERA_CHECK(capacity_bytes_ > 0, "one-shot collectives: a capacity of {} bytes", capacity_bytes);
  const std::string why = unreachable(devices_);
  TESSERA_CHECK(why.empty(), "one-shot collectives: {}", why);
  DeviceScope scope;
  // Peer access once per ordered pair of distinct devices (a second enable reports an error that is
  // not one).
  for (int a : devices_)
    for (int b : devices_) {
      if (a == b) continue;
      TESSERA_CUDA_CHECK(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        TESSERA_CUDA_CHECK(e);
    }
  ranks_.resize(devices_.size());
  for (size_t r = 0; r < devices_.size(); ++r) {
    TESSERA_CUDA_CHECK(cudaSetDevice(devices_[r]));
    TESSERA_CUDA_CHECK(cudaMalloc(&ranks_[r].buffers, 2 * devices_.size() * capacity_bytes_));
    TESSERA_CUDA_CHECK(cudaMalloc(&ranks_[r].signals, sizeof(PeerSignals)));
    TESSERA_CUDA_CHECK(cudaMemset(ranks_[r].signals, 0, sizeof(PeerSignals)));
    preload_peer_kernels();
  }
  TESSERA_CUDA_CHECK(cudaHostAlloc(&host_words_, 2 * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  host_words_[0] = host_words_[1] = 0;
  for (size_t r = 0; r < devices_.size(); ++r) {
    TESSERA_CUDA_CHECK(cudaSetDevice(devices_[r]));
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroed flags before any kernel reads them
  }
  // Where any ranks share a GPU, few blocks (kernels/comm/peer.h), on every rank: the grid must be
  // the group's.
  bool shared = false;
  for (size_t p = 0; p < devices_.size(); ++p)
    for (size_t q = 0; q < p; ++q) shared = shared || devices_[p] == devices_[q];
  for (int rank = 0; rank < size(); ++rank) {
    PeerArgs a{};
    for (size_t q = 0; q < ranks_.size(); ++q) {
      a.buffers[q] = ranks_[q].buffers;
      a.signals[q] = ranks_[q].signals;
    }
    a.half_floats = static_cast<int64_t>(capacity_bytes_ / sizeof(float));
    a.abort_flag = host_words_;
    a.status = host_words_ + 1;
    a.timeout_ns = static_cast<uint64_t>(timeout_.count());
    a.rank = rank;
    a.size = size();
    a.blocks = shared ? 4 : kPeerBlocks;
    args_.push_back(a);
  }
}

PeerGroup::~PeerGroup() {
  if (host_words_) host_words_[0] = 1;  // a kernel still waiting stops (it cannot be, after a clean run)
  DeviceScope scope;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    (void)cudaSetDevice(devices_[r]);
    (void)cudaDeviceSynchronize();
    (void)cudaFree(ranks_[r].buffers);
    (void)cudaFree(ranks_[r].signals);
  }
  if (host_words_) (void)cudaFreeHost(host_words_);
}

std::unique_ptr<Communicator> PeerGroup::communicator(int rank) {
  TESSERA_CHECK(rank >= 0 && rank < size(), "one-shot collectives: no rank {} among {}", rank, size());
  return std::make_unique<PeerCommunicator>(*this, rank);
}

// Every call, also while a recorded step is replayed (its host code runs again): a kernel that
// stopped waiting in an earlier step is reported here, at the latest one step later.
void PeerGroup::admit(int rank, uint64_t bytes, const char* what) const {
  TESSERA_CHECK(rank >= 0 && rank < size(), "one-shot collectives: no rank {} among {}", rank, size());
  check_open();
  TESSERA_CHECK(bytes <= capacity_bytes_,
                "one-shot {}: a message of {} bytes on rank {} exceeds the buffers of {} bytes", what, bytes, rank,
                capacity_bytes_);
}

void PeerGroup::all_reduce_sum(int rank, float* x, int64_t n, void* stream) const {
  admit(rank, static_cast<uint64_t>(n) * sizeof(float), "all-reduce");
  if (n > 0) launch_peer_all_reduce(args_[static_cast<size_t>(rank)], x, n, static_cast<cudaStream_t>(stream));
}

void PeerGroup::all_gather_cols(int rank, const float* part, int64_t rows, int64_t total, float* out,
                                void* stream) const {
  admit(rank, static_cast<uint64_t>(rows * total) * sizeof(float), "all-gather");
  if (rows > 0 && total > 0)
    launch_peer_all_gather_cols(args_[static_cast<size_t>(rank)], part, rows, total, out,
                                static_cast<cudaStream_t>(stream));
}

void PeerGroup::reduce_scatter_cols(int rank, const float* x, int64_t rows, int64_t total, float* out,
                                    void* stream) const {
  admit(rank, static_cast<uint64_t>(rows * total) * sizeof(float), "reduce-scatter");
  if (rows > 0 && total > 0)
    launch_peer_reduce_scatter_cols(args_[static_cast<size_t>(rank)], x, rows, total, out,
                                    static_cast<cudaStream_t>(stream));
}

void PeerGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  why_ = why;
  reinterpret_cast<volatile int*>(host_words_)[0] = 1;
}

void PeerGroup::check_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(!aborted_, "one-shot collectives: the ranks' group was aborted: {}", why_);
  const int status = reinterpret_cast<const volatile int*>(host_words_)[1];
  TESSERA_CHECK(status != kPeerStatusTimedOut,
                "one-shot collectives: a rank waited {:g} s for the others in a collective and gave up (a rank "
                "stopped calling the collectives in step with the others)",
                std::chrono::duration<double>(timeout_).count());
  TESSERA_CHECK(status == 0,
                "one-shot collectives: a rank stopped waiting in a collective because the group was "
                "aborted");
}

}  // namespace tessera::ops::cuda
