#include "ops/cuda/cuda_ops.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/sampling/sampling.h"  // sampling
#include "ops/cuda/mla_prefill.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/runtime/device_pool.h"
#include "ops/cuda/runtime/pinned_staging.h"
#include "ops/cuda/runtime/step_graph.h"
#include "ops/sample_args.h"  // sampling

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::string device_description(int index) {
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     p.totalGlobalMem / double(1 << 30));
}

namespace {

// Process-wide and never destroyed: device tensors may outlive any one backend object.
DevicePool& pool() {
  static DevicePool* p = new DevicePool();
  return *p;
}

// The stream every backend object of a device issues its work on: one per device for the process,
// as tensors are shared between backend objects (tests run one op through several forced kernels)
// and must stay ordered. Not the legacy default stream, which CUDA graphs cannot capture; a
// blocking stream, so work on the legacy stream (weight uploads, test read-backs) stays ordered
// with it. Created with `device` current.
cudaStream_t backend_stream(int device) {
  static std::mutex mutex;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard lock(mutex);
  cudaStream_t& stream = streams[device];
  if (stream == nullptr) TESSERA_CUDA_CHECK(cudaStreamCreate(&stream));
  return stream;
}

template <class T>
T* ptr(Tensor& t) {
  return t.data<T>();
}
template <class T>
const T* ptr(const Tensor& t) {
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

class CudaOps final : public Ops {
 public:
  CudaOps(const std::string& kernels, bool step_graphs, int device)
      : overrides_(kernel_overrides_from(kernels)), caps_(query_device_caps(device)) {
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    stream_ = backend_stream(device);
    if (step_graphs_enabled(step_graphs)) graphs_ = std::make_unique<StepGraphs>(stream_);
    TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt_));
    num_sms_ = caps_.num_sms;
    workspace_ = alloc(DType::kU8, {kWorkspaceBytes});
    router_done_blocks_ = alloc(DType::kI32, {1});
    TESSERA_CUDA_CHECK(cudaMemset(router_done_blocks_.raw(), 0, sizeof(int32_t)));
  }
  ~CudaOps() override {
    for (auto& [key, p] : gemm_plans_) {
      cublasLtMatrixLayoutDestroy(p.la);
      cublasLtMatrixLayoutDestroy(p.lb);
      cublasLtMatrixLayoutDestroy(p.lc);
      cublasLtMatmulDescDestroy(p.op);
    }
    cublasLtDestroy(lt_);
    if (side_stream_ != nullptr) {
      cudaEventDestroy(fork_);
      cudaEventDestroy(join_);
      cudaStreamDestroy(side_stream_);
    }
    graphs_.reset();
  }

  std::string name() const override { return "cuda"; }

  BackendPlan plan(const io::ModelConfig& c, io::KvCacheDtype kv_dtype) const override {
    BackendPlan p;
    p.device = fmt::format("{} (sm_{}), {} SMs, {:.1f} GiB; build carries {}", caps_.name, caps_.sm, caps_.num_sms,
                           caps_.total_bytes / double(1 << 30), compiled_architectures());
    size_t free = 0, total = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    p.free_bytes = free;
    // upload_linear / upload_table keep matrices in bf16 (FP8 and NVFP4 dequantized at load),
    // upload_vector keeps vectors in fp32.
    const uint64_t vectors = c.vector_parameter_count();
    p.weight_bytes = 2 * (c.parameter_count() - vectors) + 4 * vectors;
    p.weight_rule = "matrices bf16 on the device (FP8 and NVFP4 dequantized at load), vectors fp32";
    p.kernels = plan_kernels(caps_,
                             {c.num_attention_heads, c.kv_lora_rank, c.qk_rope_head_dim, c.qk_nope_head_dim,
                              c.v_head_dim, kv_dtype == io::KvCacheDtype::kFp8E4M3},
                             {c.n_routed_experts, c.hidden_size, c.moe_intermediate_size}, overrides_)
                    .rows;
    p.decode_steps = graphs_ != nullptr && overrides_.moe == MoeKernel::kPerExpert
                         ? "kernels launched one by one (--kernels moe=per-expert reads the routing back to the host, "
                           "which a CUDA graph cannot hold)"
                     : graphs_ != nullptr
                         ? fmt::format(
                               "CUDA graphs: recorded per batch size (up to {} sequences) on its second "
                               "step, then replayed (--enforce-eager turns them off)",
                               kGroupedMoeMaxTokens)
                         : "kernels launched one by one (--enforce-eager, TESSERA_CUDA_GRAPHS=0 or "
                           "TESSERA_DEVICE_POOL=exact)";
    return p;
  }

  std::optional<DeviceMemory> device_memory() override {
    sync();  // tensors released by queued work are back in the pool before it is counted
    size_t free = 0, total = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return DeviceMemory{free, pool().bytes_in_use() + pool().bytes_cached() +
                                  (graphs_ ? graphs_->memory().device_bytes() : 0)};
  }

  // From the pool, or from the graph memory while a decode step is recorded or replayed.
  Tensor alloc(DType dtype, core::Shape shape) {
    const size_t bytes = static_cast<size_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
    auto owner = graph_step() ? graphs_->memory().allocate(bytes) : pool().allocate(bytes);
    return Tensor::adopt(dtype, std::move(shape), owner.get(), core::Device::kCuda, owner);
  }
  // Memory held for the backend's life (weights, KV pages): exact-size, outside the pool's
  // power-of-two buckets (DevicePool::allocate_resident), so it takes what the memory plan counted.
  Tensor alloc_resident(DType dtype, core::Shape shape) {
    if (graph_step()) return alloc(dtype, std::move(shape));
    const size_t bytes = static_cast<size_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
    auto owner = pool().allocate_resident(bytes);
    return Tensor::adopt(dtype, std::move(shape), owner.get(), core::Device::kCuda, owner);
  }
  // Weights and other one-time uploads: synchronous, straight from the caller's memory.
  Tensor upload_bytes(DType dtype, core::Shape shape, const void* host) {
    Tensor t = alloc_resident(dtype, std::move(shape));
    TESSERA_CUDA_CHECK(cudaMemcpy(t.raw(), host, t.nbytes(), cudaMemcpyHostToDevice));
    return t;
  }
  // Per-step uploads: through pinned staging, queued on the stream without making the host wait.
  // In a recorded or replayed step: staged in graph memory, copied before the graph is launched.
  Tensor upload_async(DType dtype, core::Shape shape, const void* host) {
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
  bool graph_step() const { return graphs_ != nullptr && graphs_->active(); }
  // Waits for the stream; staged upload memory can be reused afterwards.
  void sync() {
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    staging_.recycle();
  }

  // Unspecified contents (Ops::empty); with TESSERA_DEVICE_POOL=exact they are NaN, so that a
  // reader of something no op wrote shows up in the tests that run in that mode.
  Tensor empty(core::Shape shape) override {
    Tensor t = alloc(DType::kF32, std::move(shape));
    if (DevicePool::exact_mode() && admit_op("memset", t.raw(), 0xff, t.nbytes(), stream_))
      TESSERA_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xff, t.nbytes(), stream_));
    return t;
  }
  Tensor empty_i32(core::Shape shape) override { return alloc(DType::kI32, std::move(shape)); }

  // bf16 by default; fp8 e4m3 with a per-layer scale (U8 pages, see KvLayerView) halves the bytes.
  std::vector<io::KvCacheDtype> supported_kv_dtypes() const override {
    return {io::KvCacheDtype::kBF16, io::KvCacheDtype::kFp8E4M3};
  }
  io::KvCacheDtype default_kv_dtype() const override { return io::KvCacheDtype::kBF16; }
  Tensor empty_kv_pages(core::Shape shape, io::KvCacheDtype dtype) override {
    TESSERA_CHECK(dtype == io::KvCacheDtype::kBF16 || dtype == io::KvCacheDtype::kFp8E4M3,
                  "the cuda backend stores the KV cache in bf16 or fp8_e4m3, not {}", io::kv_cache_dtype_name(dtype));
    check_mla_kernel_reads(dtype == io::KvCacheDtype::kFp8E4M3);  // refuse at start-up, not at the first decode
    Tensor t = alloc_resident(dtype == io::KvCacheDtype::kBF16 ? DType::kBF16 : DType::kU8, std::move(shape));
    TESSERA_CUDA_CHECK(cudaMemset(t.raw(), 0, t.nbytes()));
    return t;
  }
  // The forced heads-as-M and wgmma kernels read bf16 only: refused when the cache is made, before
  // any shape is known.
  void check_mla_kernel_reads(bool fp8) const {
    TESSERA_CHECK(!fp8 || !overrides_.mla || reads_fp8_cache(*overrides_.mla),
                  "MLA kernel '{}' (--kernels mla={}) cannot read an fp8_e4m3 KV cache (--kv-cache-dtype fp8): it "
                  "reads bf16 only; use --kernels mla=kv-major or mla=cuda-core, or --kv-cache-dtype bf16",
                  kernel_flag_name(*overrides_.mla), kernel_flag_name(*overrides_.mla));
  }
  // The cache as the kernels take it; throws naming `op` for pages of another dtype or an fp8 scale
  // that is not a positive finite number.
  static KvCacheArg cache_arg(const KvLayerView& cache, const char* op) {
    const DType t = cache.pages.dtype();
    TESSERA_CHECK(t == DType::kBF16 || t == DType::kU8,
                  "{}: KV pages of dtype {} (the cuda backend stores BF16 or U8 fp8 e4m3)", op, core::dtype_name(t));
    TESSERA_CHECK(t == DType::kBF16 || (std::isfinite(cache.scale) && cache.scale > 0.0f),
                  "{}: the fp8 KV cache scale {} is not a positive finite number", op, cache.scale);
    return {cache.pages.raw(), t == DType::kU8, t == DType::kU8 ? cache.scale : 1.0f};
  }

  // Tensors already on the device in the backend's format (synthetic models) are kept as they are.
  static bool on_device(const Tensor& t, DType dtype) { return t.device() == core::Device::kCuda && t.dtype() == dtype; }

  LinearWeight upload_linear(const LinearWeight& w) override {
    if (w.format == LinearWeight::Format::kDense && on_device(w.weight, DType::kBF16)) return w;
    // Dequantize row by row on the host (exact), round to bf16, upload.
    std::vector<float> row(static_cast<size_t>(w.in));
    std::vector<__nv_bfloat16> host(static_cast<size_t>(w.out * w.in));
    for (int64_t r = 0; r < w.out; ++r) {
      w.dequant_row(r, row.data());
      for (int64_t i = 0; i < w.in; ++i) host[static_cast<size_t>(r * w.in + i)] = __float2bfloat16_rn(row[i]);
    }
    LinearWeight d;
    d.format = LinearWeight::Format::kDense;
    d.name = w.name;
    d.out = w.out;
    d.in = w.in;
    d.weight = upload_bytes(DType::kBF16, {w.out, w.in}, host.data());
    return d;
  }
  Tensor upload_vector(const Tensor& t) override {
    if (on_device(t, DType::kF32)) return t;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
    return upload_bytes(DType::kF32, t.shape(), v.data());
  }
  Tensor upload_table(const Tensor& t) override {
    if (on_device(t, DType::kBF16)) return t;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
    std::vector<__nv_bfloat16> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16_rn(v[i]);
    return upload_bytes(DType::kBF16, t.shape(), b.data());
  }

  Tensor from_host_f32(core::Shape shape, const float* data) override {
    return upload_async(DType::kF32, std::move(shape), data);
  }

  void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) override {
    const int64_t vocab = table.dim(0);
    for (size_t t = 0; t < ids.size(); ++t)
      TESSERA_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} at position {} is outside the vocabulary [0, {})",
                    ids[t], t, vocab);
    Tensor d_ids = upload_async(DType::kI32, {static_cast<int64_t>(ids.size())}, ids.data());
    launch_embedding(ptr<__nv_bfloat16>(table), ptr<int32_t>(d_ids), static_cast<int64_t>(ids.size()), table.dim(1),
                     ptr<float>(out), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t col_begin) override {
    launch_rms_norm(ptr<float>(x), x.dim(0), x.dim(1), col_begin, ptr<float>(weight), weight.numel(), eps,
                    ptr<float>(out), out.dim(1), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  // out [T, out] = x [T, in] · Wᵀ, bf16 inputs, fp32 accumulate and output (cuBLASLt).
  static void check_linear_shapes(const Tensor& x, const LinearWeight& w, const Tensor& out) {
    TESSERA_CHECK(x.rank() == 2 && out.rank() == 2 && x.dim(1) == w.in && out.dim(1) == w.out && out.dim(0) == x.dim(0),
                  "linear {}: input {} / output {} do not fit weight [{}, {}]", w.name, core::shape_str(x.shape()),
                  core::shape_str(out.shape()), w.out, w.in);
  }
  // The matrix-vector kernel's arguments for out = x · Wᵀ (x [T, in], contiguous rows).
  static GemvArgs gemv_args(const Tensor& x, const LinearWeight& w, Tensor& out) {
    return {ptr<float>(x), w.in, 0, ptr<__nv_bfloat16>(w.weight), w.in, 0, ptr<float>(out), w.out, 0,
            static_cast<int>(w.in), static_cast<int>(w.out), static_cast<int>(x.dim(0))};
  }

  void linear(const Tensor& x, const LinearWeight& w, Tensor& out) override {
    const int64_t T = x.dim(0);
    check_linear_shapes(x, w, out);
    if (T == 0) return;
    if (gemv_applies(T, w.in, w.out)) {
      launch_gemv(gemv_args(x, w, out), 1, num_sms_, stream_);
      TESSERA_CUDA_CHECK_LAUNCH();
      return;
    }
    Tensor xb = alloc(DType::kBF16, {T, w.in});
    launch_f32_to_bf16(ptr<float>(x), ptr<__nv_bfloat16>(xb), x.numel(), stream_);
    gemm_bf16(ptr<__nv_bfloat16>(w.weight), ptr<__nv_bfloat16>(xb), ptr<float>(out), w.out, T, w.in);
  }

  // Two projections of one input in one matrix-vector launch at decode (q_a and kv_a).
  void linear_pair(const Tensor& x, const LinearWeight& w1, Tensor& out1, const LinearWeight& w2,
                   Tensor& out2) override {
    const int64_t T = x.dim(0);
    if (!(gemv_applies(T, w1.in, w1.out) && gemv_applies(T, w2.in, w2.out) && w1.in == w2.in)) {
      Ops::linear_pair(x, w1, out1, w2, out2);
      return;
    }
    check_linear_shapes(x, w1, out1);
    check_linear_shapes(x, w2, out2);
    GemvArgs g = gemv_args(x, w1, out1);
    g.w2 = ptr<__nv_bfloat16>(w2.weight);
    g.w2_row = w2.in;
    g.out2 = ptr<float>(out2);
    g.out2_row = w2.out;
    g.n2 = static_cast<int>(w2.out);
    launch_gemv(g, 1, num_sms_, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  // The norm folded into the matrix-vector kernel at decode: every block normalises the row itself.
  void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const LinearWeight& w,
                       Tensor& out) override {
    const int64_t T = x.dim(0);
    if (!(gemv_applies(T, w.in, w.out) && w.in <= kGemvNormMaxK)) {
      Ops::rms_norm_linear(x, norm_weight, eps, w, out);
      return;
    }
    check_linear_shapes(x, w, out);
    TESSERA_CHECK(norm_weight.numel() == w.in, "rms_norm_linear {}: norm weight of {} values for input width {}",
                  w.name, norm_weight.numel(), w.in);
    GemvArgs g = gemv_args(x, w, out);
    g.norm_weight = ptr<float>(norm_weight);
    g.norm_eps = eps;
    launch_gemv(g, 1, num_sms_, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void add_rms_norm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) override {
    TESSERA_CHECK(x.shape() == y.shape() && x.shape() == out.shape() && weight.numel() == x.dim(1),
                  "add_rms_norm: x {}, y {}, out {} and weight [{}] do not fit", core::shape_str(x.shape()),
                  core::shape_str(y.shape()), core::shape_str(out.shape()), weight.numel());
    launch_add_rms_norm(ptr<float>(x), ptr<float>(y), x.dim(0), x.dim(1), ptr<float>(weight), eps, ptr<float>(out),
                        stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void add_inplace(Tensor& x, const Tensor& y) override {
    launch_add(ptr<float>(x), ptr<float>(y), x.numel(), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    launch_silu_mul(ptr<float>(gate), ptr<float>(up), ptr<float>(out), gate.numel(), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  void rope_inplace(Tensor& x, const RopeTables& tables, int64_t col_begin, int64_t col_stride,
                    int64_t count) override {
    const int64_t rows = x.dim(0);
    launch_rope(ptr<float>(x), rows, x.numel() / std::max<int64_t>(rows, 1), ptr<float>(tables.cos),
                ptr<float>(tables.sin), tables.cos.dim(1), col_begin, col_stride, count, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void kv_cache_write(KvLayerView& cache, const Tensor& latent, std::span<const AttentionSeq> seqs) override {
    const KvCacheArg arg = cache_arg(cache, "kv_cache_write");
    TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == latent.dim(1),
                  "kv_cache_write: cache entry {} != latent width {}", cache.pages.rank() == 3 ? cache.pages.dim(2) : 0,
                  latent.dim(1));
    StepMeta meta = upload_meta(seqs, cache.page_size, cache.pages.dim(0));
    if (arg.fp8)
      launch_kv_cache_write_fp8(ptr<float>(latent), latent.dim(0), latent.dim(1), meta.info.data<TokenInfo>(),
                                ptr<int32_t>(meta.tables), ptr<uint8_t>(cache.pages), cache.page_size, arg.scale,
                                stream_);
    else
      launch_kv_cache_write(ptr<float>(latent), latent.dim(0), latent.dim(1), meta.info.data<TokenInfo>(),
                            ptr<int32_t>(meta.tables), ptr<__nv_bfloat16>(cache.pages), cache.page_size, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void mla_prepare(Tensor& q, Tensor& latent, const Tensor& latent_norm, float eps, const RopeTables& tables,
                   const MlaDims& d, KvLayerView& cache, std::span<const AttentionSeq> seqs) override {
    const KvCacheArg arg = cache_arg(cache, "mla_prepare");
    const int64_t T = q.dim(0), entry = d.latent + d.rope;
    TESSERA_CHECK(q.rank() == 2 && q.dim(1) == d.heads * (d.nope + d.rope) && latent.rank() == 2 &&
                      latent.dim(0) == T && latent.dim(1) == entry && latent_norm.numel() == d.latent &&
                      d.rope % 2 == 0 && tables.cos.dim(1) == d.rope / 2,
                  "mla_prepare: q {}, latent {}, norm [{}] and rope tables [{}] do not fit {} heads of {} + {}, "
                  "latent {} + {}", core::shape_str(q.shape()), core::shape_str(latent.shape()), latent_norm.numel(),
                  tables.cos.dim(1), d.heads, d.nope, d.rope, d.latent, d.rope);
    TESSERA_CHECK(cache.pages.rank() == 3 && cache.pages.dim(2) == entry, "mla_prepare: cache entry {} != latent width {}",
                  cache.pages.rank() == 3 ? cache.pages.dim(2) : 0, entry);
    StepMeta meta = upload_meta(seqs, cache.page_size, cache.pages.dim(0));
    const MlaPrepareArgs a{ptr<float>(q), q.dim(1), static_cast<int>(d.heads), static_cast<int>(d.nope),
                           static_cast<int>(d.rope), static_cast<int>(d.latent), ptr<float>(latent),
                           ptr<float>(latent_norm), eps, ptr<float>(tables.cos), ptr<float>(tables.sin),
                           meta.info.data<TokenInfo>(), ptr<int32_t>(meta.tables), cache.page_size, arg.scale, T};
    launch_mla_prepare(a, cache.pages.raw(), arg.fp8, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void mla_attention(const Tensor& q, const KvLayerView& cache, const LinearWeight& kv_b, const MlaDims& d,
                     std::span<const AttentionSeq> seqs, Tensor& out) override {
    const KvCacheArg cache_in = cache_arg(cache, "mla_attention");
    const MlaPlan& plan = mla_plan(d, cache_in.fp8);
    const bool decode_only =
        std::all_of(seqs.begin(), seqs.end(), [](const AttentionSeq& s) { return s.num_tokens <= 1; });
    // --- MLA prefill over decompressed K/V (mla_prefill.h): sequences with more than one new token
    // run there where the plan says so; the step's decode tokens come back here, compacted, as a
    // decode-only step.
    if (!decode_only && plan.prefill == MlaPrefillKernel::kDecompressed) {
      const MlaPrefillEnv env{lt_, workspace_.raw(), kWorkspaceBytes, stream_,
                              [this](DType t, core::Shape s) { return alloc(t, std::move(s)); },
                              [this](DType t, core::Shape s, const void* host) {
                                return upload_async(t, std::move(s), host);
                              }};
      return run_mla_prefill_step(env, q, cache, kv_b, d, seqs, out,
                                  [&](const Tensor& qd, std::span<const AttentionSeq> sd, Tensor& od) {
                                    mla_attention(qd, cache, kv_b, d, sd, od);
                                  });
    }
    // --- end MLA prefill
    const int64_t T = q.dim(0), H = d.heads, entry = d.latent + d.rope, qk = d.nope + d.rope;
    StepMeta meta = upload_meta(seqs, cache.page_size, cache.pages.dim(0));
    const MlaKernel kernel = plan.absorbed_kernel(decode_only);
    const __nv_bfloat16* kv_b_w = ptr<__nv_bfloat16>(kv_b.weight);
    // The tensor-core path absorbs W_UK and applies W_UV as per-head batched bf16 GEMMs, each over
    // the hi and lo bf16 parts of its fp32 input (so only the weights are bf16, as in the fp32
    // path, which keeps every product on CUDA cores).
    const bool gemms = kernel != MlaKernel::kCudaCore;
    // A few decode tokens: W_UK and W_UV as matrix-vector kernels (gemv.cu) on the fp32 inputs.
    const bool gemv = gemms && gemv_transposed_applies(T, d.latent) && gemv_applies(T, d.latent, d.v);
    Tensor q_full = alloc(DType::kF32, {T, H, entry});
    if (gemv) {
      // q_full[t, h, :latent] = Σ_n q_nope[t, h, n] · W_UK[h][n, :]; q_pe passes through in the
      // same kernel.
      GemvArgs absorb{ptr<float>(q), H * qk, qk, kv_b_w, d.latent, (d.nope + d.v) * d.latent, ptr<float>(q_full),
                      H * entry, entry, static_cast<int>(d.nope), static_cast<int>(d.latent), static_cast<int>(T)};
      absorb.pass_through = static_cast<int>(d.rope);
      launch_gemv_transposed(absorb, H, stream_);
    } else if (gemms) {
      // q_full[t, h, :latent] = q_nope[t, h] · W_UK[h], W_UK[h] = kv_b rows [h(nope+v), h(nope+v)+nope).
      Tensor qb = alloc(DType::kBF16, {2, T, H * qk});
      __nv_bfloat16* q_hi = ptr<__nv_bfloat16>(qb);
      __nv_bfloat16* q_lo = q_hi + T * H * qk;
      launch_f32_to_bf16_split(ptr<float>(q), q_hi, q_lo, q.numel(), stream_);
      const GemmShape absorb{false, d.latent, T, d.nope, d.latent, H * qk, H * entry, H, (d.nope + d.v) * d.latent,
                             qk, entry};
      gemm_bf16_strided(absorb, kv_b_w, q_hi, ptr<float>(q_full));
      gemm_bf16_strided(absorb, kv_b_w, q_lo, ptr<float>(q_full), 1.0f);
      // q_pe passes through.
      if (admit_op("memcpy2d", ptr<float>(q_full) + d.latent, entry, ptr<float>(q) + d.nope, qk, d.rope, T * H,
                   stream_))
        TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(ptr<float>(q_full) + d.latent, entry * 4, ptr<float>(q) + d.nope, qk * 4,
                                             d.rope * 4, T * H, cudaMemcpyDeviceToDevice, stream_));
    } else {
      launch_mla_absorb_q(ptr<float>(q), T, H, d.nope, d.rope, kv_b_w, d.v, d.latent, ptr<float>(q_full), stream_);
    }
    Tensor o_lat = alloc(DType::kF32, {T, H, d.latent});
    const int64_t splits = mla_attend_splits(T, H, meta.max_visible, num_sms_, kernel);
    Tensor scratch = alloc(DType::kF32, {mla_attend_scratch_floats(T, H, d.latent, splits)});
    launch_mla_attend(ptr<float>(q_full), T, H, d.latent, d.rope, meta.info.data<TokenInfo>(),
                      ptr<int32_t>(meta.tables), cache_in, cache.pages.dim(0), cache.page_size, splits, d.scale,
                      ptr<float>(o_lat), ptr<float>(scratch), kernel, stream_);
    if (gemv) {
      // out[t, h*v + j] = o_lat[t, h] · W_UV[h][j], W_UV[h] = kv_b rows [h(nope+v)+nope, (h+1)(nope+v)).
      launch_gemv({ptr<float>(o_lat), H * d.latent, d.latent, kv_b_w + d.nope * d.latent, d.latent,
                   (d.nope + d.v) * d.latent, ptr<float>(out), H * d.v, d.v, static_cast<int>(d.latent),
                   static_cast<int>(d.v), static_cast<int>(T)},
                  H, num_sms_, stream_);
    } else if (gemms) {
      // out[t, h*v + j] = Σ_l o_lat[t, h, l] · W_UV[h][j, l], W_UV[h] = kv_b rows [h(nope+v)+nope, (h+1)(nope+v)).
      Tensor ob = alloc(DType::kBF16, {2, T, H * d.latent});
      __nv_bfloat16* o_hi = ptr<__nv_bfloat16>(ob);
      __nv_bfloat16* o_lo = o_hi + T * H * d.latent;
      launch_f32_to_bf16_split(ptr<float>(o_lat), o_hi, o_lo, o_lat.numel(), stream_);
      const GemmShape up_v{true, d.v, T, d.latent, d.latent, H * d.latent, H * d.v, H, (d.nope + d.v) * d.latent,
                           d.latent, d.v};
      gemm_bf16_strided(up_v, kv_b_w + d.nope * d.latent, o_hi, ptr<float>(out));
      gemm_bf16_strided(up_v, kv_b_w + d.nope * d.latent, o_lo, ptr<float>(out), 1.0f);
    } else {
      launch_mla_up_v(ptr<float>(o_lat), T, H, d.latent, kv_b_w, d.nope, d.v, ptr<float>(out), stream_);
    }
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  void moe_route(const Tensor& x, const LinearWeight& gate, const Tensor& bias, const RouterConfig& cfg, Tensor& ids,
                 Tensor& weights) override {
    const int64_t T = x.dim(0);
    TESSERA_CHECK(cfg.experts <= 1024 && cfg.groups <= 64 && cfg.top_k <= 32,
                  "cuda moe_route: at most 1024 experts in 64 groups and 32 experts per token (got {}, {}, {})",
                  cfg.experts, cfg.groups, cfg.top_k);
    Tensor logits = alloc(DType::kF32, {T, cfg.experts});
    const int64_t H = x.dim(1);
    if (T <= kRouterKernelMaxTokens) {
      launch_router_fused(ptr<float>(x), T, H, ptr<__nv_bfloat16>(gate.weight), cfg.experts, ptr<float>(logits),
                          ptr<float>(bias), cfg.top_k, cfg.groups, cfg.top_groups, cfg.normalize, cfg.scaling,
                          ptr<int32_t>(ids), ptr<float>(weights),
                          static_cast<unsigned*>(router_done_blocks_.raw()), stream_);
      TESSERA_CUDA_CHECK_LAUNCH();
      return;
    }
    // logits = (x_hi + x_lo) · Wᵀ on tensor cores: x = hi + lo to ~2^-17, each product exact in fp32.
    Tensor xs = alloc(DType::kBF16, {2, T, H});
    __nv_bfloat16* hi = ptr<__nv_bfloat16>(xs);
    launch_f32_to_bf16_split(ptr<float>(x), hi, hi + T * H, x.numel(), stream_);
    const GemmShape g{true, cfg.experts, T, H, H, H, cfg.experts, 1, 0, 0, 0};
    gemm_bf16_strided(g, ptr<__nv_bfloat16>(gate.weight), hi, ptr<float>(logits));
    gemm_bf16_strided(g, ptr<__nv_bfloat16>(gate.weight), hi + T * H, ptr<float>(logits), 1.0f);
    launch_router_select(ptr<float>(logits), ptr<float>(bias), T, cfg.experts, cfg.top_k, cfg.groups, cfg.top_groups,
                         cfg.normalize, cfg.scaling, ptr<int32_t>(ids), ptr<float>(weights), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  // Decode-sized steps: pairs sorted by expert on the device and grouped kernels that read each
  // routed expert once (moe_grouped.cu), no host round trip. Larger steps (prefill) are
  // compute-bound: per-expert cuBLASLt GEMMs, for which the routing is read back to size them.
  void moe_experts(const Tensor& x, const std::vector<ExpertWeights>& experts, const Tensor& ids,
                   const Tensor& weights, Tensor& out, const ExpertWeights* shared) override {
    const int64_t T = x.dim(0), E = static_cast<int64_t>(experts.size());
    if (E == 0 || T == 0) {
      if (admit_op("memset", out.raw(), 0, out.nbytes(), stream_))
        TESSERA_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream_));
      if (shared && T > 0) add_shared_expert(x, *shared, out);
      return;
    }
    if (!moe_grouped_applies(x, experts)) {
      moe_experts_per_expert(x, experts, ids, weights, out);
      if (shared) add_shared_expert(x, *shared, out);
      return;
    }
    // The shared expert rides along as expert E in a last slot of weight 1 when it has the routed
    // experts' shape (one shared expert): its weights are read in the same kernels.
    const bool fold = shared != nullptr && shared_expert_groups_with(x, experts, *shared);
    const ExpertTable& table = expert_table(experts, fold ? shared : nullptr);
    const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(ids.dim(1)),
                         fold ? static_cast<int>(E) : -1};
    const int64_t table_experts = fold ? E + 1 : E;
    const GroupedExperts run = grouped_experts(x, slots, table_experts, table, 0, experts[0].gate.out, stream_);
    launch_moe_combine(run.y, T, x.dim(1), slots, table_experts, nullptr, ptr<float>(out), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
    if (shared && !fold) add_shared_expert(x, *shared, out);
  }

  // At batch 1 the router is a chain of short dependent steps that leaves most of the memory
  // bandwidth idle for ~20 µs. The shared expert needs only x, so on the grouped path it runs on a
  // second stream from the start of the block, beside the router and the routed experts' sorting,
  // and the combine adds its output last (the order moe_experts adds it in, so the sum is the same).
  // TESSERA_SHARED_EXPERT_STREAM=0 keeps it in the routed kernels' launch (for A/B measurements).
  void moe(const Tensor& x, const LinearWeight& router, const Tensor& bias, const RouterConfig& cfg,
           const std::vector<ExpertWeights>& experts, const ExpertWeights* shared, Tensor& out) override {
    const int64_t T = x.dim(0), E = static_cast<int64_t>(experts.size());
    if (!shared || T == 0 || E == 0 || !shared_expert_stream_enabled() || !moe_grouped_applies(x, experts) ||
        !shared_expert_groups_with(x, experts, *shared)) {
      Ops::moe(x, router, bias, cfg, experts, shared, out);
      return;
    }
    const ExpertTable& table = expert_table(experts, shared);
    const int64_t inter = experts[0].gate.out;
    cudaStream_t side = side_stream();
    if (admit_op("fork", fork_, stream_, side)) {
      TESSERA_CUDA_CHECK(cudaEventRecord(fork_, stream_));
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(side, fork_, 0));
    }
    // Expert E of the table alone, one slot a token: scratch.y is the shared expert's [T, H] output.
    const MoeSlots shared_slots{nullptr, nullptr, 0, 0};
    const GroupedExperts shared_run = grouped_experts(x, shared_slots, 1, table, E, inter, side);
    // Should anything below throw (a refused router config, an allocation), the second stream must
    // finish before shared_run's buffers go back to the pool: later work would reuse memory it writes.
    struct WaitOnUnwind {
      cudaStream_t stream;
      bool joined = false;
      ~WaitOnUnwind() {
        if (!joined) (void)cudaStreamSynchronize(stream);
      }
    } unwind{side};
    if (admit_op("record", join_, side)) TESSERA_CUDA_CHECK(cudaEventRecord(join_, side));
    Tensor ids = alloc(DType::kI32, {T, cfg.top_k}), weights = alloc(DType::kF32, {T, cfg.top_k});
    moe_route(x, router, bias, cfg, ids, weights);
    const MoeSlots slots{ptr<int32_t>(ids), ptr<float>(weights), static_cast<int>(cfg.top_k), -1};
    const GroupedExperts run = grouped_experts(x, slots, E, table, 0, inter, stream_);
    if (admit_op("join", stream_, join_)) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_, 0));
    unwind.joined = true;
    launch_moe_combine(run.y, T, x.dim(1), slots, E, shared_run.y, ptr<float>(out), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
    // shared_run's buffers go back to the pool here: later work on stream_ is ordered after join_.
  }

  // Whether the grouped kernels take these routed experts for a step of x's tokens: the plan's
  // choice (kernel_registry.h), for experts of one shape (the grouped kernels index one table).
  bool moe_grouped_applies(const Tensor& x, const std::vector<ExpertWeights>& experts) {
    const int64_t T = x.dim(0), H = x.dim(1), E = static_cast<int64_t>(experts.size()), inter = experts[0].gate.out;
    if (!moe_plan({E, H, inter}).grouped_for(T)) return false;
    const bool uniform = std::all_of(experts.begin(), experts.end(),
                                     [&](const ExpertWeights& e) { return has_routed_shape(e, H, inter); });
    TESSERA_CHECK(uniform || overrides_.moe != MoeKernel::kGrouped,
                  "MoE kernel 'grouped' was forced but the routed experts do not all have the shape of the first "
                  "(hidden {}, moe_intermediate {})",
                  H, inter);
    return uniform;
  }
  static bool has_routed_shape(const ExpertWeights& e, int64_t hidden, int64_t inter) {
    return e.gate.out == inter && e.up.out == inter && e.down.in == inter && e.gate.in == hidden &&
           e.down.out == hidden;
  }
  // Whether the shared expert can run in the grouped kernels as one more expert of the table.
  static bool shared_expert_groups_with(const Tensor& x, const std::vector<ExpertWeights>& experts,
                                        const ExpertWeights& shared) {
    const int64_t H = x.dim(1), inter = experts[0].gate.out;
    return has_routed_shape(shared, H, inter) &&
           moe_grouped_supported(H, inter, static_cast<int64_t>(experts.size()) + 1);
  }
  static bool shared_expert_stream_enabled() {
    static const bool enabled = ab_switch_on("TESSERA_SHARED_EXPERT_STREAM");
    return enabled;
  }

  void add_shared_expert(const Tensor& x, const ExpertWeights& shared, Tensor& out) {
    Tensor y = alloc(DType::kF32, {x.dim(0), x.dim(1)});
    mlp(x, shared, y);
    add_inplace(out, y);
  }

  // Routing read back to the host, then per expert a gather, three cuBLASLt GEMMs and a weighted
  // scatter-add.
  void moe_experts_per_expert(const Tensor& x, const std::vector<ExpertWeights>& experts, const Tensor& ids,
                              const Tensor& weights, Tensor& out) {
    const int64_t T = x.dim(0), H = x.dim(1), K = ids.dim(1);
    std::vector<int32_t> h_ids(static_cast<size_t>(T * K));
    std::vector<float> h_w(static_cast<size_t>(T * K));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(h_ids.data(), ids.raw(), h_ids.size() * 4, cudaMemcpyDeviceToHost, stream_));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(h_w.data(), weights.raw(), h_w.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync();
    std::vector<std::vector<int32_t>> rows(experts.size());
    std::vector<std::vector<float>> wts(experts.size());
    for (int64_t i = 0; i < T * K; ++i) {
      const int32_t e = h_ids[static_cast<size_t>(i)];
      TESSERA_CHECK(e >= 0 && static_cast<size_t>(e) < experts.size(), "moe_experts: expert id {} out of range", e);
      rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(i / K));
      wts[static_cast<size_t>(e)].push_back(h_w[static_cast<size_t>(i)]);
    }
    if (admit_op("memset", out.raw(), 0, out.nbytes(), stream_))
      TESSERA_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream_));
    for (size_t e = 0; e < experts.size(); ++e) {
      const int64_t n = static_cast<int64_t>(rows[e].size());
      if (n == 0) continue;
      const int64_t inter = experts[e].gate.out;
      Tensor d_rows = upload_async(DType::kI32, {n}, rows[e].data());
      Tensor d_w = upload_async(DType::kF32, {n}, wts[e].data());
      Tensor xin = alloc(DType::kF32, {n, H});
      launch_gather_rows_i32(ptr<float>(x), H, ptr<int32_t>(d_rows), n, ptr<float>(xin), stream_);
      Tensor g = alloc(DType::kF32, {n, inter}), u = alloc(DType::kF32, {n, inter}), act = alloc(DType::kF32, {n, inter});
      linear(xin, experts[e].gate, g);
      linear(xin, experts[e].up, u);
      silu_mul(g, u, act);
      Tensor y = alloc(DType::kF32, {n, H});
      linear(act, experts[e].down, y);
      launch_scatter_add_rows(ptr<float>(y), H, ptr<int32_t>(d_rows), ptr<float>(d_w), n, ptr<float>(out), stream_);
      TESSERA_CUDA_CHECK_LAUNCH();
    }
  }

  void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) override {
    Tensor d_rows = upload_async(DType::kI64, {static_cast<int64_t>(rows.size())}, rows.data());
    launch_gather_rows(ptr<float>(x), x.dim(1), ptr<int64_t>(d_rows), static_cast<int64_t>(rows.size()),
                       ptr<float>(out), stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  // --- sampling (sampling.h): only token ids (and logprobs) come back to the host.
  void sample(const Tensor& logits, std::span<const SampleRow> rows, Tensor& ids_out, Tensor* logprob_out) override {
    check_sample_args(logits, rows, ids_out, logprob_out);
    if (rows.empty()) return;
    Tensor d_rows = upload_async(DType::kU8, {static_cast<int64_t>(rows.size_bytes())}, rows.data());
    launch_sample(ptr<float>(logits), logits.dim(0), logits.dim(1), d_rows.data<SampleRow>(), ptr<int32_t>(ids_out),
                  logprob_out ? ptr<float>(*logprob_out) : nullptr, stream_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  // --- end sampling

  // Decode steps as CUDA graphs (step_graph.h). Every step (key -1 too) runs in a scope within which
  // upload_meta keeps the step's attention metadata for all layers; it is dropped when the step ends.
  Tensor graphed_step(int64_t key, const std::function<Tensor()>& step) override {
    if (in_step_) return step();
    auto scoped = [&] {
      struct Scope {
        CudaOps& ops;
        explicit Scope(CudaOps& o) : ops(o) { ops.in_step_ = true; }
        ~Scope() {
          ops.in_step_ = false;
          ops.meta_cache_ = StepMeta{};
          ops.meta_key_.reset();
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
  void step_boundary() override {
    if (graph_step()) graphs_->boundary();
  }
  StepGraphStats graph_stats() const { return graphs_ ? graphs_->stats() : StepGraphStats{}; }

  std::vector<int32_t> to_host_i32(const Tensor& x) override {
    std::vector<int32_t> v(static_cast<size_t>(x.numel()));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(v.data(), x.raw(), v.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync();
    return v;
  }
  Tensor from_host_i32(core::Shape shape, const int32_t* data) override {
    return upload_async(DType::kI32, std::move(shape), data);
  }

  std::vector<float> to_host_f32(const Tensor& x) override {
    std::vector<float> v(static_cast<size_t>(x.numel()));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(v.data(), x.raw(), v.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync();
    return v;
  }

 private:
  static constexpr int64_t kWorkspaceBytes = 32 << 20;

  // Device arrays of the experts' weight pointers, built once per expert list (a model layer's
  // list lives as long as the model).
  struct ExpertTable {
    Tensor storage;
    const __nv_bfloat16* const* gate = nullptr;
    const __nv_bfloat16* const* up = nullptr;
    const __nv_bfloat16* const* down = nullptr;
  };
  // `shared`, when given, is appended as expert E. Cached per expert list, and checked against the
  // weights' current device pointers: a list freed and another allocated at the same address (a
  // second model, a test) must not get the old table. Not while a recorded step is replayed: steps
  // of one key use the same weights (Ops::graphed_step), and the check reads every expert's weights
  // (~10 µs of host time a layer, which a replay's check would add before the graph's launch).
  const ExpertTable& expert_table(const std::vector<ExpertWeights>& experts, const ExpertWeights* shared) {
    const auto key = std::make_pair(experts.data(), shared);
    if (graphs_ != nullptr && graphs_->replaying()) {
      auto it = expert_tables_.find(key);
      if (it != expert_tables_.end()) return it->second.second;
    }
    const size_t E = experts.size() + (shared ? 1 : 0);
    std::vector<const __nv_bfloat16*> host(3 * E);
    for (size_t e = 0; e < E; ++e) {
      const ExpertWeights& w = e < experts.size() ? experts[e] : *shared;
      host[e] = ptr<__nv_bfloat16>(w.gate.weight);
      host[E + e] = ptr<__nv_bfloat16>(w.up.weight);
      host[2 * E + e] = ptr<__nv_bfloat16>(w.down.weight);
    }
    auto it = expert_tables_.find(key);
    if (it != expert_tables_.end() && it->second.first == host) return it->second.second;
    ExpertTable t;
    t.storage = upload_bytes(DType::kU8, {static_cast<int64_t>(host.size() * sizeof(void*))}, host.data());
    auto* base = static_cast<const __nv_bfloat16* const*>(t.storage.raw());
    t.gate = base;
    t.up = base + E;
    t.down = base + 2 * E;
    auto& slot = expert_tables_[key];
    slot = {std::move(host), std::move(t)};
    return slot.second;
  }

  // The buffers of one launch_moe_grouped_experts call, held until the work that reads them is queued.
  struct GroupedExperts {
    Tensor xb, meta, act, y_rows, part;
    float* y = nullptr;  // y_rows' data: [pairs, hidden]
  };
  // The pairs of `slots` through experts [first, first + experts) of `table`, on `stream`.
  GroupedExperts grouped_experts(const Tensor& x, const MoeSlots& slots, int64_t experts, const ExpertTable& table,
                                 int64_t first, int64_t inter, cudaStream_t stream) {
    const int64_t T = x.dim(0), H = x.dim(1), P = T * slots.per_token();
    GroupedExperts r;
    r.xb = alloc(DType::kBF16, {T, H});
    r.meta = alloc(DType::kI32, {2 * experts + 2 + P});
    r.act = alloc(DType::kBF16, {P, inter});
    r.y_rows = alloc(DType::kF32, {P, H});
    r.part = alloc(DType::kF32, {2 * moe_grouped_gate_up_splits(T, P, H, inter) * P * inter});
    int32_t* m = ptr<int32_t>(r.meta);
    const MoeGroupedScratch scratch{ptr<__nv_bfloat16>(r.xb), m, m + experts + 1, m + 2 * experts + 1,
                                    m + 2 * experts + 2, ptr<__nv_bfloat16>(r.act), ptr<float>(r.y_rows),
                                    ptr<float>(r.part)};
    launch_moe_grouped_experts(ptr<float>(x), T, H, slots, experts, table.gate + first, table.up + first,
                               table.down + first, inter, scratch, stream);
    TESSERA_CUDA_CHECK_LAUNCH();
    r.y = ptr<float>(r.y_rows);
    return r;
  }

  cudaStream_t side_stream() {
    if (side_stream_ == nullptr) {
      TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    }
    return side_stream_;
  }

  struct StepMeta {
    Tensor info;    // TokenInfo per token
    Tensor tables;  // all block tables, concatenated
    int64_t max_visible = 0;  // longest context any token of the step attends to
  };
  // The plans of the shapes this backend has run (kernel_registry.h), so that a step pays a lookup,
  // not the chooser's formatting: the same choosers `tessera plan` prints from.
  const MlaPlan& mla_plan(const MlaDims& d, bool fp8) {
    const MlaShape shape{d.heads, d.latent, d.rope, d.nope, d.v, fp8};
    for (const auto& [key, plan] : mla_plans_)
      if (key == shape) return plan;
    return mla_plans_.emplace_back(shape, plan_mla(caps_, shape, overrides_)).second;
  }
  const MoePlan& moe_plan(const MoeShape& shape) {
    for (const auto& [key, plan] : moe_plans_)
      if (key == shape) return plan;
    return moe_plans_.emplace_back(shape, plan_moe(caps_, shape, overrides_)).second;
  }

  // Within one step (Ops::graphed_step) every layer asks twice for the metadata of the same
  // sequences (the model's span): it is built and uploaded once. Outside a step (ops called one by
  // one) it is built every time.
  StepMeta upload_meta(std::span<const AttentionSeq> seqs, int64_t page, int64_t num_pages) {
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

  // A column-major cuBLASLt problem: C (m x n, fp32) = op(A) (m x k) · B (k x n), bf16 inputs,
  // `batch` problems `stride_*` elements apart. op(A) = Aᵀ with A stored k x m when trans_a.
  struct GemmShape {
    bool trans_a;
    int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
    using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
    Key key() const { return {trans_a, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c}; }
  };
  struct GemmPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // The descriptors and the heuristic's algorithm are cached per shape: asking cuBLASLt costs tens
  // of microseconds, more than a decode-sized GEMM takes.
  const GemmPlan& gemm_plan(const GemmShape& g) {
    auto it = gemm_plans_.find(g.key());
    if (it != gemm_plans_.end()) return it->second;
    GemmPlan p;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, g.k, g.n, g.ldb));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, g.m, g.n, g.ldc));
    cublasLtMatmulPreference_t pref;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspaceBytes;
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    if (g.batch > 1) {
      const int32_t count = static_cast<int32_t>(g.batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {{p.la, g.stride_a}, {p.lb, g.stride_b}, {p.lc, g.stride_c}};
      for (const auto& [layout, stride] : layouts) {
        TESSERA_CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof(stride)));
      }
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
    p.algo = heur.algo;
    return gemm_plans_.emplace(g.key(), p).first->second;
  }

  // c = op(a) · b + beta · c.
  void gemm_bf16_strided(const GemmShape& g, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c,
                         float beta = 0.0f) {
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

  // Row-major out[n, m] = in[n, k] · W[m, k]ᵀ: in column-major terms outᵀ (m x n) = W (m x k, stored
  // as k x m, transposed) · inᵀ (k x n).
  void gemm_bf16(const __nv_bfloat16* w, const __nv_bfloat16* in, float* out, int64_t m, int64_t n, int64_t k) {
    gemm_bf16_strided({true, m, n, k, k, k, m, 1, 0, 0, 0}, w, in, out);
  }

  std::map<GemmShape::Key, GemmPlan> gemm_plans_;
  KernelOverrides overrides_;                           // --kernels / TESSERA_KERNELS
  DeviceCaps caps_;                                     // the device this backend runs on
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
  bool in_step_ = false;  // inside graphed_step
  std::map<std::pair<const ExpertWeights*, const ExpertWeights*>,
           std::pair<std::vector<const __nv_bfloat16*>, ExpertTable>>
      expert_tables_;
  cublasLtHandle_t lt_ = nullptr;
  int num_sms_ = 1;
  cudaStream_t stream_ = nullptr;  // backend_stream(): every op is ordered on it
  // A second stream for work an op runs beside its main chain (the shared expert), forked from and
  // joined back into stream_ with the two events before the op returns.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  Tensor workspace_;
  Tensor router_done_blocks_;  // launch_router_fused's counter (0 between calls)
  std::unique_ptr<StepGraphs> graphs_;  // null: --enforce-eager, TESSERA_CUDA_GRAPHS=0 or an exact pool
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(const std::string& kernels, bool step_graphs, int device) {
  return std::make_unique<CudaOps>(kernels, step_graphs, device);
}

bool step_graphs_enabled(bool step_graphs) {
  return step_graphs && ab_switch_on("TESSERA_CUDA_GRAPHS") && !DevicePool::exact_mode();
}

StepGraphStats step_graph_stats(const Ops& ops) {
  const auto* cuda = dynamic_cast<const CudaOps*>(&ops);
  return cuda ? cuda->graph_stats() : StepGraphStats{};
}

std::vector<uint8_t> device_bytes(const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  // cudaMemcpy orders after the legacy default stream, with which the backend's stream synchronises.
  if (!v.empty()) TESSERA_CUDA_CHECK(cudaMemcpy(v.data(), t.raw(), v.size(), cudaMemcpyDeviceToHost));
  return v;
}

Tensor random_bf16_tensor(core::Shape shape, float scale, uint64_t seed) {
  const int64_t n = core::shape_numel(shape);
  auto owner = pool().allocate(static_cast<size_t>(n) * 2);
  Tensor t = Tensor::adopt(DType::kBF16, std::move(shape), owner.get(), core::Device::kCuda, owner);
  launch_fill_random_bf16(t.data<__nv_bfloat16>(), n, seed, scale, nullptr);
  TESSERA_CUDA_CHECK_LAUNCH();
  return t;
}

}  // namespace tessera::ops::cuda
