// What every op family of the CUDA backend shares: the stream and the second stream beside it, device
// memory and uploads, cuBLASLt and its GEMM plans, the decode-step graphs and the step's attention
// metadata, the device caps, the forced kernels and the per-shape kernel plans. CudaOps (cuda_ops.cpp)
// owns one and forwards each op to its family (linear.h, elementwise.h, mla.h, moe.h, sampling.h,
// weights.h), free functions that take the context, so no family reaches into another's state.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "core/tensor.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/runtime/launch_gate.h"
#include "ops/cuda/runtime/pinned_staging.h"
#include "ops/cuda/runtime/step_graph.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

class DevicePool;

// One per device, process-wide and never destroyed: device tensors may outlive any one backend
// object. device_pool() is the calling thread's current device's.
DevicePool& device_pool(int device);
DevicePool& device_pool();

template <class T>
T* ptr(core::Tensor& t) {
  return t.data<T>();
}
template <class T>
const T* ptr(const core::Tensor& t) {
  return t.data<T>();
}

// Stream work other than a kernel launch, through the replay check of recorded decode steps
// (launch_gate.h): `what` names the operation, `values` are everything it hands the driver.
template <class... V>
bool admit_op(const char* what, V... values) {
  return admit([&](Signature& s) {
    s.add(static_cast<const void*>(what));
    (s.add(values), ...);
  });
}

// A column-major cuBLASLt problem: C (m x n, fp32) = op(A) (m x k) · B (k x n), bf16 inputs,
// `batch` problems `stride_*` elements apart. op(A) = Aᵀ with A stored k x m when trans_a.
struct GemmShape {
  bool trans_a;
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  using Key =
      std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  Key key() const { return {trans_a, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c}; }
};

// The token count (a GEMM's n) whose algorithm a GEMM of n tokens borrows with
// TESSERA_GEMM_ALGO_BUCKETS (default on): n itself up to 64, then the next of four steps an octave (80, 96, 112,
// 128, 160, ...). Per-expert prefill GEMMs see a new n at almost every call (the routing decides
// it), and each new n cost a heuristic query of tens of microseconds on the host, three an expert:
// at 2048-token steps about what the expert's GEMMs take on the GPU.
int64_t gemm_algo_columns(int64_t n);
// Whether TESSERA_GEMM_ALGO_BUCKETS is on (default 1: a fresh prompt's per-expert GEMMs meet new
// token counts, and asking the heuristic for each left an H100 idle 36% of an 8192-token prefill).
bool gemm_algo_buckets_on();

// The attention metadata of a step's sequences on the device (CudaContext::upload_meta).
struct StepMeta {
  core::Tensor info;        // TokenInfo per token
  core::Tensor tables;      // all block tables, concatenated
  int64_t max_visible = 0;  // longest context any token of the step attends to
};

class CudaContext {
 public:
  static constexpr int64_t kWorkspaceBytes = 32 << 20;

  // `kernels`, `step_graphs`, `device`: as make_cuda_ops takes them (cuda_ops.h).
  CudaContext(const std::string& kernels, bool step_graphs, int device);
  int device() const { return device_; }
  // Makes this backend's device the calling thread's current one: a tensor-parallel rank's thread
  // calls it before its step (threads start on device 0, and one thread loads every rank).
  void make_current() const;
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const DeviceCaps& caps() const { return caps_; }
  const KernelOverrides& overrides() const { return overrides_; }
  int num_sms() const { return num_sms_; }
  // backend_stream(): every op is ordered on it.
  cudaStream_t stream() const { return stream_; }

  // A second stream for work an op runs beside its main chain (the shared expert), forked from and
  // joined back into stream() with fork_event() and join_event() before the op returns. Made at the
  // first call.
  cudaStream_t side_stream();
  cudaEvent_t fork_event() const { return fork_; }
  cudaEvent_t join_event() const { return join_; }

  // From the pool, or from the graph memory while a decode step is recorded or replayed.
  core::Tensor alloc(core::DType dtype, core::Shape shape);
  // Memory held for the backend's life (weights, KV pages): exact-size, outside the pool's
  // power-of-two buckets (DevicePool::allocate_resident), so it takes what the memory plan counted.
  core::Tensor alloc_resident(core::DType dtype, core::Shape shape);
  // Weights and other one-time uploads: synchronous, straight from the caller's memory.
  core::Tensor upload_bytes(core::DType dtype, core::Shape shape, const void* host);
  // Per-step uploads: through pinned staging, queued on the stream without making the host wait.
  // In a recorded or replayed step: staged in graph memory, copied before the graph is launched.
  core::Tensor upload_async(core::DType dtype, core::Shape shape, const void* host);
  bool graph_step() const { return graphs_ != nullptr && graphs_->active(); }
  // True while a recorded step is replayed (its operations checked, not issued).
  bool replaying() const { return graphs_ != nullptr && graphs_->replaying(); }
  // Waits for the stream; staged upload memory can be reused afterwards.
  void sync();
  // Free device memory and what this backend holds (pool and graph memory), after the stream's work.
  Ops::DeviceMemory device_memory();

  // c = op(a) · b + beta · c on the stream.
  void gemm_bf16_strided(const GemmShape& g, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c,
                         float beta = 0.0f);
  // Row-major out[n, m] = in[n, k] · W[m, k]ᵀ: in column-major terms outᵀ (m x n) = W (m x k, stored
  // as k x m, transposed) · inᵀ (k x n).
  void gemm_bf16(const __nv_bfloat16* w, const __nv_bfloat16* in, float* out, int64_t m, int64_t n, int64_t k);
  // What the MLA prefill path borrows for its own GEMMs.
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() { return workspace_.raw(); }

  // The plans of the shapes this backend has run (kernel_registry.h), so that a step pays a lookup,
  // not the chooser's formatting: the same choosers `tessera plan` prints from.
  const MlaPlan& mla_plan(const MlaDims& d, bool fp8);
  const MoePlan& moe_plan(const MoeShape& shape);

  // The step's attention metadata on the device. Within one step (Ops::graphed_step) every layer
  // asks twice for the metadata of the same sequences (the model's span): it is built and uploaded
  // once. Outside a step (ops called one by one) it is built every time.
  StepMeta upload_meta(std::span<const AttentionSeq> seqs, int64_t page, int64_t num_pages);

  // Ops::graphed_step: decode steps as CUDA graphs (step_graph.h). Every step (key -1 too) runs in
  // a scope within which upload_meta keeps the step's attention metadata for all layers; it is
  // dropped when the step ends.
  core::Tensor graphed_step(int64_t key, const std::function<core::Tensor()>& step);
  void step_boundary();
  // Whether decode steps are recorded (make_cuda_ops' step_graphs, step_graphs_enabled).
  bool step_graphs() const { return graphs_ != nullptr; }
  StepGraphStats graph_stats() const;

 private:
  struct GemmPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // The descriptors and the heuristic's algorithm are cached per shape: asking cuBLASLt costs tens
  // of microseconds, more than a decode-sized GEMM takes. With TESSERA_GEMM_ALGO_BUCKETS (default on) a shape
  // of a new token count borrows the algorithm of its bucket (gemm_algo_columns), asked once.
  const GemmPlan& gemm_plan(const GemmShape& g);
  static GemmPlan gemm_descriptors(const GemmShape& g);
  static void destroy_descriptors(GemmPlan& p);
  cublasLtMatmulAlgo_t gemm_heuristic(const GemmPlan& p, const GemmShape& g);

  std::map<GemmShape::Key, GemmPlan> gemm_plans_;
  std::map<GemmShape::Key, cublasLtMatmulAlgo_t> gemm_bucket_algos_;
  KernelOverrides overrides_;                           // --kernels / TESSERA_KERNELS
  int device_ = 0;                                      // the device this backend runs on
  DeviceCaps caps_;                                     // and its properties
  std::deque<std::pair<MlaShape, MlaPlan>> mla_plans_;  // deque: references stay valid as it grows
  std::deque<std::pair<MoeShape, MoePlan>> moe_plans_;
  PinnedStaging staging_;
  // upload_meta's within-step cache.
  struct MetaKey {
    const AttentionSeq* seqs = nullptr;
    size_t count = 0;
    int64_t page = 0, num_pages = 0;
    bool operator==(const MetaKey&) const = default;
  };
  StepMeta meta_cache_;
  std::optional<MetaKey> meta_key_;  // none: nothing cached
  bool in_step_ = false;             // inside graphed_step
  cublasLtHandle_t lt_ = nullptr;
  int num_sms_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  core::Tensor workspace_;
  std::unique_ptr<StepGraphs> graphs_;  // null: --enforce-eager, TESSERA_CUDA_GRAPHS=0 or an exact pool
};

}  // namespace tessera::ops::cuda
