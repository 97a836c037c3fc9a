#include "ops/cuda/nccl.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "core/error.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/runtime/context.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  core::fail("NCCL {}: {}{}{}", what, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclGroup& group, ncclComm_t comm, int rank, int size)
      : group_(group), comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // In place: every rank gets the ring's (or tree's) one result, the same bits on every rank.
  void all_reduce_sum(Ops& ops, core::Tensor& x) override {
    TESSERA_CHECK(x.dtype() == core::DType::kF32, "NCCL all-reduce: fp32 activations expected, got {}",
                  core::dtype_name(x.dtype()));
    group_.check_open();
    const auto stream = static_cast<cudaStream_t>(backend_stream(ops));
    if (x.numel() == 0 || !admit_op("nccl all-reduce", x.raw(), x.numel(), static_cast<void*>(comm_), stream)) return;
    check_nccl(ncclAllReduce(x.raw(), x.raw(), static_cast<size_t>(x.numel()), ncclFloat32, ncclSum, comm_, stream),
               "all-reduce", comm_);
  }

  // NCCL gathers equal blocks: each rank's part goes into a block of the widest part's columns,
  // then every block's columns into their place in `out`.
  void all_gather_cols(Ops& ops, const core::Tensor& part, core::Tensor& out) override {
    TESSERA_CHECK(part.dtype() == core::DType::kF32 && out.dtype() == core::DType::kF32 && part.dim(0) == out.dim(0),
                  "NCCL all-gather: part [{}, {}] and out [{}, {}] must be fp32 of the same rows", part.dim(0),
                  part.dim(1), out.dim(0), out.dim(1));
    const int64_t rows = part.dim(0), total = out.dim(1), width = (total + size_ - 1) / size_;
    const auto [first, count] = balanced_cols(total, size_, rank_);
    TESSERA_CHECK(part.dim(1) == count,
                  "NCCL all-gather: rank {} of {} holds {} of {} columns where the balanced split gives it {}", rank_,
                  size_, part.dim(1), total, count);
    (void)first;
    if (rows == 0 || total == 0) return;
    group_.check_open();
    const auto stream = static_cast<cudaStream_t>(backend_stream(ops));
    core::Tensor send = ops.empty({rows, width}), gathered = ops.empty({size_ * rows, width});
    const size_t f = sizeof(float);
    if (count > 0 && admit_op("nccl gather pack", send.raw(), part.raw(), rows, width, count, stream))
      TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(send.raw(), width * f, part.raw(), count * f, count * f, rows,
                                           cudaMemcpyDeviceToDevice, stream));
    if (admit_op("nccl all-gather", send.raw(), gathered.raw(), rows * width, static_cast<void*>(comm_), stream))
      check_nccl(
          ncclAllGather(send.raw(), gathered.raw(), static_cast<size_t>(rows * width), ncclFloat32, comm_, stream),
          "all-gather", comm_);
    for (int r = 0; r < size_; ++r) {
      const auto [c0, n] = balanced_cols(total, size_, r);
      float* dst = out.data<float>() + c0;
      const float* src = gathered.data<float>() + static_cast<int64_t>(r) * rows * width;
      if (n > 0 && admit_op("nccl gather unpack", dst, src, rows, total, width, n, stream))
        TESSERA_CUDA_CHECK(
            cudaMemcpy2DAsync(dst, total * f, src, width * f, n * f, rows, cudaMemcpyDeviceToDevice, stream));
    }
  }

  // NCCL scatters equal contiguous blocks: every rank's columns are packed into a block of the
  // widest rank's columns ([size][rows][width]), reduce-scattered, and this rank's block unpacked.
  void reduce_scatter_cols(Ops& ops, const core::Tensor& x, core::Tensor& out) override {
    TESSERA_CHECK(x.dtype() == core::DType::kF32 && out.dtype() == core::DType::kF32 && x.rank() == 2,
                  "NCCL reduce-scatter: x [rows, total] and out must be fp32, got {} {} and {}",
                  core::dtype_name(x.dtype()), core::shape_str(x.shape()), core::dtype_name(out.dtype()));
    const int64_t rows = x.dim(0), total = x.dim(1), width = (total + size_ - 1) / size_;
    const auto [first, count] = balanced_cols(total, size_, rank_);
    TESSERA_CHECK(out.numel() == rows * count, "NCCL reduce-scatter: rank {} of {} gets {} of {} columns, not {}",
                  rank_, size_, count, total, core::shape_str(out.shape()));
    (void)first;
    if (rows == 0 || total == 0) return;
    group_.check_open();
    const auto stream = static_cast<cudaStream_t>(backend_stream(ops));
    const size_t f = sizeof(float);
    core::Tensor send = ops.empty({size_ * rows, width}), mine = ops.empty({rows, width});
    if (admit_op("nccl scatter zero", send.raw(), send.numel(), stream))
      TESSERA_CUDA_CHECK(cudaMemsetAsync(send.raw(), 0, send.nbytes(), stream));  // the padding of short blocks
    for (int r = 0; r < size_; ++r) {
      const auto [c0, n] = balanced_cols(total, size_, r);
      float* dst = send.data<float>() + static_cast<int64_t>(r) * rows * width;
      const float* src = x.data<float>() + c0;
      if (n > 0 && admit_op("nccl scatter pack", dst, src, rows, total, width, n, stream))
        TESSERA_CUDA_CHECK(
            cudaMemcpy2DAsync(dst, width * f, src, total * f, n * f, rows, cudaMemcpyDeviceToDevice, stream));
    }
    if (admit_op("nccl reduce-scatter", send.raw(), mine.raw(), rows * width, static_cast<void*>(comm_), stream))
      check_nccl(ncclReduceScatter(send.raw(), mine.raw(), static_cast<size_t>(rows * width), ncclFloat32, ncclSum,
                                   comm_, stream),
                 "reduce-scatter", comm_);
    if (count > 0 && admit_op("nccl scatter unpack", out.raw(), mine.raw(), rows, width, count, stream))
      TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(out.raw(), count * f, mine.raw(), width * f, count * f, rows,
                                           cudaMemcpyDeviceToDevice, stream));
  }

 private:
  const NcclGroup& group_;
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

NcclGroup::NcclGroup(std::vector<int> devices) : devices_(std::move(devices)) {
  TESSERA_CHECK(!devices_.empty(), "NCCL group: no devices");
  std::vector<ncclComm_t> comms(devices_.size());
  check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices_.size()), devices_.data()),
             fmt::format("init of {} ranks", devices_.size()).c_str());
  comms_.assign(comms.begin(), comms.end());
}

NcclGroup::~NcclGroup() {
  if (aborted_) return;  // ncclCommAbort freed them
  for (void* c : comms_) (void)ncclCommDestroy(static_cast<ncclComm_t>(c));
}

void NcclGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  why_ = why;
  for (void* c : comms_) (void)ncclCommAbort(static_cast<ncclComm_t>(c));
}

void NcclGroup::check_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(!aborted_, "NCCL: the ranks' group was aborted: {}", why_);
}

std::unique_ptr<Communicator> NcclGroup::communicator(int rank) {
  TESSERA_CHECK(rank >= 0 && rank < size(), "NCCL group: no rank {} among {}", rank, size());
  return std::make_unique<NcclCommunicator>(*this, static_cast<ncclComm_t>(comms_[static_cast<size_t>(rank)]), rank,
                                            size());
}

std::string nccl_version() {
  int v = 0;
  check_nccl(ncclGetVersion(&v), "version");
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

}  // namespace tessera::ops::cuda
