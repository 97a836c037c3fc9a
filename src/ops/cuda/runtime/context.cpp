#include "ops/cuda/runtime/context.h"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/runtime/device_pool.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

DevicePool& device_pool(int device) {
  static std::mutex mutex;
  static std::map<int, DevicePool*> pools;  // never freed (see context.h)
  std::lock_guard lock(mutex);
  DevicePool*& p = pools[device];
  if (p == nullptr) p = new DevicePool(device);
  return *p;
}

DevicePool& device_pool() {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  return device_pool(device);
}

namespace {

// The stream every backend object of a device issues its work on: one per device for the process,
// as tensors are shared between backend objects (tests run one op through several forced kernels)
// and must stay ordered. Not the legacy default stream, which CUDA graphs cannot capture; a
// blocking stream, so work on the legacy stream (weight uploads, test read-backs) stays ordered
// with it. Created with `device` current. With stream_priorities() at the device's highest
// priority: where both streams have blocks waiting for an SM (the router's chain and the shared
// expert beside it at batch 1), this stream's go first. (The second stream keeps the default, the
// lowest.)
cudaStream_t backend_stream(int device) {
  static std::mutex mutex;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard lock(mutex);
  cudaStream_t& stream = streams[device];
  if (stream == nullptr) {
    int least = 0, greatest = 0;
    if (stream_priorities()) TESSERA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamDefault, greatest));
  }
  return stream;
}

}  // namespace

CudaContext::CudaContext(const std::string& kernels, bool step_graphs, int device)
    : overrides_(kernel_overrides_from(kernels)), device_(device), caps_(query_device_caps(device)) {
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  stream_ = backend_stream(device);
  if (step_graphs_enabled(step_graphs)) graphs_ = std::make_unique<StepGraphs>(stream_);
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt_));
  num_sms_ = caps_.num_sms;
  workspace_ = alloc(DType::kU8, {kWorkspaceBytes});
}

CudaContext::~CudaContext() {
  for (auto& [key, p] : gemm_plans_) destroy_descriptors(p);
  cublasLtDestroy(lt_);
  if (side_stream_ != nullptr) {
    cudaEventDestroy(fork_);
    cudaEventDestroy(join_);
    cudaStreamDestroy(side_stream_);
  }
  graphs_.reset();
}

void CudaContext::make_current() const { TESSERA_CUDA_CHECK(cudaSetDevice(device_)); }

cudaStream_t CudaContext::side_stream() {
  if (side_stream_ == nullptr) {
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  }
  return side_stream_;
}

Tensor CudaContext::alloc(DType dtype, core::Shape shape) {
  const size_t bytes = static_cast<size_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
  auto owner = graph_step() ? graphs_->memory().allocate(bytes) : device_pool(device_).allocate(bytes);
  return Tensor::adopt(dtype, std::move(shape), owner.get(), core::Device::kCuda, owner);
}

Tensor CudaContext::alloc_resident(DType dtype, core::Shape shape) {
  if (graph_step()) return alloc(dtype, std::move(shape));
  const size_t bytes = static_cast<size_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
  auto owner = device_pool(device_).allocate_resident(bytes);
  return Tensor::adopt(dtype, std::move(shape), owner.get(), core::Device::kCuda, owner);
}

Tensor CudaContext::upload_bytes(DType dtype, core::Shape shape, const void* host) {
  Tensor t = alloc_resident(dtype, std::move(shape));
  TESSERA_CUDA_CHECK(cudaMemcpy(t.raw(), host, t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

Tensor CudaContext::upload_async(DType dtype, core::Shape shape, const void* host) {
  if (graph_step()) {
    const size_t bytes = static_cast<size_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
    GraphMemory::Staged staged = graphs_->memory().stage(host, bytes);
    (void)admit_op("staged upload", staged.device.get(), bytes);  // the same layout at every replay
    void* device = staged.device.get();
    return Tensor::adopt(dtype, std::move(shape), device, core::Device::kCuda, std::move(staged.device));
  }
  Tensor t = alloc(dtype, std::move(shape));
  if (t.nbytes() == 0) return t;
  void* staged = staging_.stage(host, t.nbytes());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(t.raw(), staged, t.nbytes(), cudaMemcpyHostToDevice, stream_));
  return t;
}

void CudaContext::sync() {
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  staging_.recycle();
}

Ops::DeviceMemory CudaContext::device_memory() {
  sync();  // tensors released by queued work are back in the pool before it is counted
  size_t free = 0, total = 0;
  {
    CurrentDevice on(device_);
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  }
  const DevicePool& pool = device_pool(device_);
  Ops::DeviceMemory m;
  m.free_bytes = free;
  m.total_bytes = total;
  m.resident_bytes = pool.bytes_resident();
  m.activation_bytes = pool.bytes_in_use() - m.resident_bytes + pool.bytes_cached();
  m.graph_bytes = graphs_ ? graphs_->memory().device_bytes() : 0;
  m.held_bytes = m.resident_bytes + m.activation_bytes + m.graph_bytes;
  return m;
}

CudaContext::GemmPlan CudaContext::gemm_descriptors(const GemmShape& g) {
  GemmPlan p;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TESSERA_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, g.k, g.n, g.ldb));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, g.m, g.n, g.ldc));
  if (g.batch > 1) {
    const int32_t count = static_cast<int32_t>(g.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {p.la, g.stride_a}, {p.lb, g.stride_b}, {p.lc, g.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      TESSERA_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &stride, sizeof(stride)));
    }
  }
  return p;
}

void CudaContext::destroy_descriptors(GemmPlan& p) {
  cublasLtMatrixLayoutDestroy(p.la);
  cublasLtMatrixLayoutDestroy(p.lb);
  cublasLtMatrixLayoutDestroy(p.lc);
  cublasLtMatmulDescDestroy(p.op);
  p = GemmPlan{};
}

cublasLtMatmulAlgo_t CudaContext::gemm_heuristic(const GemmPlan& p, const GemmShape& g) {
  cublasLtMatmulPreference_t pref;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (g.batch > 1) {
    // Per-head operands start at offsets that are only 16-byte aligned.
    const uint32_t align = 16;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &heur, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  TESSERA_CHECK(found > 0, "cuBLASLt has no bf16 GEMM algorithm for m={} n={} k={} batch={}", g.m, g.n, g.k, g.batch);
  return heur.algo;
}

int64_t gemm_algo_columns(int64_t n) {
  if (n <= 64) return n;
  int64_t octave = 64;  // octave < n <= 2 * octave
  while (2 * octave < n) octave *= 2;
  const int64_t step = octave / 4;
  return (n + step - 1) / step * step;
}

bool gemm_algo_buckets_on() {
  static const bool on = core::env_flag("TESSERA_GEMM_ALGO_BUCKETS");
  return on;
}

const CudaContext::GemmPlan& CudaContext::gemm_plan(const GemmShape& g) {
  auto it = gemm_plans_.find(g.key());
  if (it != gemm_plans_.end()) return it->second;
  GemmPlan p = gemm_descriptors(g);
  GemmShape bucket = g;
  bucket.n = gemm_algo_columns(g.n);
  bool borrowed = false;
  if (gemm_algo_buckets_on() && g.batch == 1 && bucket.n != g.n) {
    // The algorithm the heuristic picks for the bucket's width, asked once per bucket; kept for this
    // width only where cuBLASLt confirms that it runs it within the workspace.
    auto a = gemm_bucket_algos_.find(bucket.key());
    if (a == gemm_bucket_algos_.end()) {
      GemmPlan b = gemm_descriptors(bucket);
      const cublasLtMatmulAlgo_t algo = gemm_heuristic(b, bucket);
      destroy_descriptors(b);
      a = gemm_bucket_algos_.emplace(bucket.key(), algo).first;
    }
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(lt_, p.op, p.la, p.lb, p.lc, p.lc, &a->second, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= kWorkspaceBytes) {
      p.algo = a->second;
      borrowed = true;
    }
  }
  if (!borrowed) p.algo = gemm_heuristic(p, g);
  return gemm_plans_.emplace(g.key(), p).first->second;
}

void CudaContext::gemm_bf16_strided(const GemmShape& g, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c,
                                    float beta) {
  if (g.n == 0) return;
  const GemmPlan& p = gemm_plan(g);
  const float alpha = 1.0f;
  const bool issue = admit([&](Signature& s) {
    s.add(static_cast<const void*>("gemm"));
    s.add(g.trans_a);
    for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch, g.stride_a, g.stride_b, g.stride_c}) s.add(v);
    for (const void* v : {static_cast<const void*>(a), static_cast<const void*>(b), static_cast<const void*>(c)})
      s.add(v);
    s.add(beta);
    s.add(stream_);
  });
  if (issue)
    TESSERA_CUBLAS_CHECK(cublasLtMatmul(lt_, p.op, &alpha, a, p.la, b, p.lb, &beta, c, p.lc, c, p.lc, &p.algo,
                                        workspace_.raw(), kWorkspaceBytes, stream_));
}

void CudaContext::gemm_bf16(const __nv_bfloat16* w, const __nv_bfloat16* in, float* out, int64_t m, int64_t n,
                            int64_t k) {
  gemm_bf16_strided({true, m, n, k, k, k, m, 1, 0, 0, 0}, w, in, out);
}

const MlaPlan& CudaContext::mla_plan(const MlaDims& d, bool fp8) {
  const MlaShape shape{d.heads, d.latent, d.rope, d.nope, d.v, fp8};
  for (const auto& [key, plan] : mla_plans_)
    if (key == shape) return plan;
  return mla_plans_.emplace_back(shape, plan_mla(caps_, shape, overrides_)).second;
}

const MoePlan& CudaContext::moe_plan(const MoeShape& shape) {
  for (const auto& [key, plan] : moe_plans_)
    if (key == shape) return plan;
  return moe_plans_.emplace_back(shape, plan_moe(caps_, shape, overrides_)).second;
}

StepMeta CudaContext::upload_meta(std::span<const AttentionSeq> seqs, int64_t page, int64_t num_pages) {
  const MetaKey key{seqs.data(), seqs.size(), page, num_pages};
  if (in_step_ && meta_key_ && key == *meta_key_) return meta_cache_;
  std::vector<TokenInfo> info;
  // Each sequence's table at a multiple of one power-of-two stride (unused entries are never read):
  // a decode step's uploads then keep their sizes while its sequences grow by a page, which a
  // recorded CUDA graph needs (step_graph.h).
  size_t max_pages = 1;
  for (const auto& s : seqs) max_pages = std::max(max_pages, s.block_table.size());
  const size_t stride = std::bit_ceil(max_pages);
  std::vector<int32_t> tables(seqs.size() * stride, 0);
  int64_t max_visible = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    const int32_t offset = static_cast<int32_t>(i * stride);
    if (s.block_table.empty()) {
      // Tokens this cache does not hold (another rank's part of a sharded cache): position -1,
      // which the write kernels skip.
      for (int64_t t = 0; t < s.num_tokens; ++t) info.push_back({-1, offset});
      continue;
    }
    TESSERA_CHECK(static_cast<int64_t>(s.block_table.size()) * page >= s.start_pos + s.num_tokens,
                  "attention: block table of {} pages cannot hold {} tokens", s.block_table.size(),
                  s.start_pos + s.num_tokens);
    for (size_t j = 0; j < s.block_table.size(); ++j) {
      const int32_t p = s.block_table[j];
      TESSERA_CHECK(p >= 0 && p < num_pages, "attention: page id {} out of range [0, {})", p, num_pages);
      tables[offset + j] = p;
    }
    for (int64_t t = 0; t < s.num_tokens; ++t) info.push_back({static_cast<int32_t>(s.start_pos + t), offset});
    max_visible = std::max(max_visible, s.start_pos + s.num_tokens);
  }
  if (tables.empty()) tables.push_back(0);  // no sequences
  StepMeta m;
  m.info = upload_async(DType::kU8, {static_cast<int64_t>(info.size() * sizeof(TokenInfo))}, info.data());
  m.tables = upload_async(DType::kI32, {static_cast<int64_t>(tables.size())}, tables.data());
  m.max_visible = max_visible;
  if (in_step_) {
    meta_cache_ = m;
    meta_key_ = key;
  }
  return m;
}

Tensor CudaContext::graphed_step(int64_t key, const std::function<Tensor()>& step) {
  if (in_step_) return step();
  auto scoped = [&] {
    struct Scope {
      CudaContext& ctx;
      explicit Scope(CudaContext& c) : ctx(c) { ctx.in_step_ = true; }
      ~Scope() {
        ctx.in_step_ = false;
        ctx.meta_cache_ = StepMeta{};
        ctx.meta_key_.reset();
      }
    } scope(*this);
    return step();
  };
  // Larger decode steps take the per-expert MoE path, which reads the routing back to the host: a
  // capture would fail (and be retried once per batch size).
  // So do all steps with --kernels moe=per-expert.
  if (graphs_ == nullptr || key < 0 || key > kGroupedMoeMaxTokens || overrides_.moe == MoeKernel::kPerExpert)
    return scoped();
  return graphs_->run(key, scoped);
}

void CudaContext::step_boundary() {
  if (graph_step()) graphs_->boundary();
}

StepGraphStats CudaContext::graph_stats() const { return graphs_ ? graphs_->stats() : StepGraphStats{}; }

}  // namespace tessera::ops::cuda
