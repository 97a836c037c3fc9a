#include "ops/cuda/tools/kernel_bench.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_registry.h"
#include "ops/cuda/kernels/attention/mla_prefill_kernels.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/sampling/sampling.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { TESSERA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DeviceMem() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median time of `iters` calls of fn, after two warm-ups, measured with CUDA events. Before each
// call the stream writes a buffer larger than the L2 (128 MB), as Triton's do_bench does: the
// call's inputs come from memory, not from an L2 left warm by the previous call (a 32k-context KV
// cache of 37 MB would otherwise be partly cached), and the call's kernels are queued while the
// flush runs, so the events time the GPU's work and not the host's launch latency (a decode step
// replays its kernels from a CUDA graph, back to back).
constexpr size_t kL2FlushBytes = size_t{128} << 20;
template <class F>
double time_it(int iters, F&& fn) {
  static DeviceMem flush(kL2FlushBytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  fn();
  fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    cudaMemsetAsync(flush.p, i & 0xff, kL2FlushBytes);
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1e-3);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Decode-step layers a "in a graph" row records (each over its own KV cache, 8 x 37.7 MB at 32k
// context: far beyond the L2).
constexpr int kLayersInStep = 8;

// Filled on the device: gigabytes of KV cache would take minutes to generate on the host.
void fill_random_bf16(void* p, size_t n, uint64_t seed) {
  launch_fill_random_bf16(static_cast<__nv_bfloat16*>(p), static_cast<int64_t>(n), seed, 1.0f, 0);
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
}

// fp8 e4m3 bytes of magnitude 2^-3 .. 2 (no NaN codes): a 1 MiB random pattern, repeated by
// doubling device-to-device copies (a host-generated cache of gigabytes would take too long).
void fill_random_fp8(void* p, size_t n, uint64_t seed) {
  std::vector<uint8_t> h(std::min<size_t>(n, size_t{1} << 20));
  std::mt19937_64 rng(seed);
  for (auto& b : h) b = static_cast<uint8_t>((rng() & 0x87u) | ((4u + rng() % 4u) << 3));
  auto* d = static_cast<uint8_t*>(p);
  TESSERA_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  for (size_t filled = h.size(); filled < n; filled *= 2)
    TESSERA_CUDA_CHECK(cudaMemcpy(d + filled, d, std::min(filled, n - filled), cudaMemcpyDeviceToDevice));
}

// A KV cache of n random values, fp8 e4m3 or bf16.
void fill_random_cache(void* p, size_t n, bool fp8, uint64_t seed) {
  if (fp8)
    fill_random_fp8(p, n, seed);
  else
    fill_random_bf16(p, n, seed);
}

void fill_random_f32(void* p, size_t n, uint64_t seed) {
  std::vector<float> h(n);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (auto& v : h) v = nd(rng);
  TESSERA_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
}

// A 1 M-value pattern of fill_random_f32, repeated by doubling device-to-device copies (a prefill's
// q of gigabytes would take seconds to generate on the host).
void fill_repeated_f32(void* p, size_t n, uint64_t seed) {
  const size_t first = std::min<size_t>(n, size_t{1} << 20);
  fill_random_f32(p, first, seed);
  auto* d = static_cast<float*>(p);
  for (size_t filled = first; filled < n; filled *= 2)
    TESSERA_CUDA_CHECK(cudaMemcpy(d + filled, d, std::min(filled, n - filled) * 4, cudaMemcpyDeviceToDevice));
}

// Seconds one layer's launches take in a CUDA graph of kLayersInStep layers, each reading its own
// cache of `values` (bf16 or fp8) through launch(cache, stream); timed as time_it times a call.
template <class Launch>
double layer_in_graph_seconds(int iterations, int64_t values, bool fp8, Launch&& launch) {
  std::vector<std::unique_ptr<DeviceMem>> caches;
  for (int l = 0; l < kLayersInStep; ++l) {
    caches.push_back(std::make_unique<DeviceMem>(static_cast<size_t>(values) * (fp8 ? 1 : 2)));
    fill_random_cache(caches.back()->p, static_cast<size_t>(values), fp8, 3 + l);
  }
  // Capture needs a stream of its own (not the legacy default stream); the graph is then launched
  // on the default stream, after time_it's flush.
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (const auto& c : caches) launch(c->p, s);
  cudaGraph_t graph = nullptr;
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  TESSERA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double t = time_it(iterations, [&] { cudaGraphLaunch(exec, 0); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return t / kLayersInStep;
}

double gemm_tflops(int64_t m, int64_t n, int64_t k, int iters) {
  cublasLtHandle_t lt;
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt));
  DeviceMem a(m * k * 2), b(k * n * 2), c(m * n * 2), ws(64 << 20);
  fill_random_bf16(a.p, m * k, 1);
  fill_random_bf16(b.p, k * n, 2);
  cublasLtMatmulDesc_t op;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  size_t wsb = 64 << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
  const float alpha = 1, beta = 0;
  double t = time_it(iters, [&] {
    cublasLtMatmul(lt, op, &alpha, a.p, la, b.p, lb, &beta, c.p, lc, c.p, lc, &heur.algo, ws.p, wsb, 0);
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  return 2.0 * m * n * k / t / 1e12;
}

// Seconds a plain read of `bytes` takes (launch_read_stream over every SM), timed as the kernels are.
double read_stream_seconds(size_t bytes, int iterations) {
  DeviceMem src(bytes), sink(16);
  TESSERA_CUDA_CHECK(cudaMemset(src.p, 1, bytes));
  int sms = 1;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return time_it(iterations, [&] { launch_read_stream(src.p, bytes, sink.p, sms, 0); });
}

// MLA prefill attention (mla_prefill_kernels.h) of one prompt of `context` tokens from scratch,
// causal, at Kimi-K2.5's head dims (qk 128 + 64, v 128, latent 512), in bf16 precision: the
// mma.sync kernel with blocks of 64 and of 128 query rows, and the Hopper wgmma kernel where this
// GPU and build run it. Its inputs as the prefill path leaves them:
// q fp32, the pass's latents and decompressed K_nope | V in bf16. FLOPs: (qk + v) x 2 a visible (query, key) pair and
// head.
template <class Wanted, class Report>
void bench_mla_prefill(const KernelBenchOptions& o, const DeviceCaps& caps, const Wanted& wanted,
                       const Report& report) {
  constexpr int64_t nope = 128, rope = 64, v = 128, latent = 512, entry = latent + rope;
  const bool sm90a = caps.sm == 90 && has_sm90a_code();
  for (int64_t heads : o.heads)
    for (int64_t n : o.contexts)
      for (const char* variant : {"mma64", "mma128", "wgmma"}) {
        const std::string name = fmt::format("mla_prefill {} h{} ctx{}", variant, heads, n);
        const bool wgmma = std::string(variant) == "wgmma";
        if (!wanted(name) || (wgmma && !sm90a)) continue;
        const int64_t rows = std::string(variant) == "mma64" ? 64 : 128;
        DeviceMem q(n * heads * (nope + rope) * 4), lat(n * entry * 2), kv(n * heads * (nope + v) * 2),
            out(n * heads * v * 4);
        fill_repeated_f32(q.p, static_cast<size_t>(n * heads * (nope + rope)), 21);
        fill_random_bf16(lat.p, static_cast<size_t>(n * entry), 22);
        fill_random_bf16(kv.p, static_cast<size_t>(n * heads * (nope + v)), 23);
        const PrefillChunk chunk{0, static_cast<int32_t>(n), 0, 0, static_cast<int32_t>(n), 0,
                                 0, kChunkFirst | kChunkLast};
        std::vector<PrefillTile> tiles;
        for (int64_t q0 = 0; q0 < n; q0 += rows) tiles.push_back({0, static_cast<int32_t>(q0)});
        DeviceMem d_chunk(sizeof(PrefillChunk)), d_tiles(tiles.size() * sizeof(PrefillTile));
        TESSERA_CUDA_CHECK(cudaMemcpy(d_chunk.p, &chunk, sizeof(chunk), cudaMemcpyHostToDevice));
        TESSERA_CUDA_CHECK(
            cudaMemcpy(d_tiles.p, tiles.data(), tiles.size() * sizeof(PrefillTile), cudaMemcpyHostToDevice));
        PrefillAttendArgs a{q.as<float>(),
                            lat.as<__nv_bfloat16>(),
                            kv.as<__nv_bfloat16>(),
                            nullptr,
                            false,
                            d_chunk.as<PrefillChunk>(),
                            d_tiles.as<PrefillTile>(),
                            out.as<float>(),
                            nullptr,
                            static_cast<int>(heads),
                            static_cast<int>(nope),
                            static_cast<int>(rope),
                            static_cast<int>(v),
                            static_cast<int>(latent),
                            0.0721687836f,
                            1.0f,
                            static_cast<int>(rows)};
        const int64_t num_tiles = static_cast<int64_t>(tiles.size());
        KernelBenchRow r;
        r.name = name;
        r.seconds = time_it(o.iterations, [&] {
          if (wgmma)
            launch_mla_prefill_attend_wgmma(a, num_tiles, 0);
          else
            launch_mla_prefill_attend(a, num_tiles, 0);
        });
        r.bytes = static_cast<double>(n) * (heads * ((nope + rope) * 4 + (nope + v) * 2 + v * 4) + entry * 2);
        r.flops = 2.0 * static_cast<double>(nope + rope + v) * heads * (static_cast<double>(n) * (n + 1) / 2);
        report(r);
      }
}

}  // namespace

double measure_copy_bandwidth(size_t bytes, int iterations) {
  DeviceMem src(bytes), dst(bytes);
  TESSERA_CUDA_CHECK(cudaMemset(src.p, 1, bytes));
  const double t = time_it(iterations, [&] { cudaMemcpy(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice); });
  return 2.0 * static_cast<double>(bytes) / t;
}

double measure_gemm_tflops(int iterations) { return gemm_tflops(8192, 8192, 8192, iterations); }

void synchronize_device() { TESSERA_CUDA_CHECK(cudaDeviceSynchronize()); }

std::vector<KernelBenchRow> run_kernel_benchmarks(const KernelBenchOptions& o) {
  std::vector<KernelBenchRow> rows;
  fmt::print("device: {}\n", device_description());
  // Ceilings, measured now on this GPU.
  const double bw = measure_copy_bandwidth(size_t{2} << 30, o.iterations);
  const double gemm = measure_gemm_tflops(o.iterations);
  fmt::print("ceiling: device copy {:.0f} GB/s (read + write), bf16 GEMM 8192^3 {:.0f} TFLOP/s\n", bw / 1e9, gemm);
  {
    // Not a ceiling the rows are measured against, but what a read-only stream (a decode step's
    // weights) can reach beside the copy.
    const size_t bytes = size_t{2} << 30;
    fmt::print("read-only stream {:.0f} GB/s\n\n",
               static_cast<double>(bytes) / read_stream_seconds(bytes, o.iterations) / 1e9);
  }
  std::fflush(stdout);
  fmt::print("{:<52} {:>10} {:>10} {:>7} {:>10} {:>7}\n", "kernel", "time us", "GB/s", "of bw", "TFLOP/s", "of mma");
  auto report = [&](const KernelBenchRow& r) {
    const double gbs = r.bytes / r.seconds / 1e9, tf = r.flops / r.seconds / 1e12;
    fmt::print("{:<52} {:>10.1f} {:>10.0f} {:>6.0f}% {:>10.1f} {:>6.0f}%\n", r.name, r.seconds * 1e6, gbs,
               100 * gbs * 1e9 / bw, tf, 100 * tf / gemm);
    std::fflush(stdout);
    rows.push_back(r);
  };
  auto wanted = [&](const std::string& name) { return o.filter.empty() || name.find(o.filter) != std::string::npos; };

  // MLA decode (absorbed) at Kimi-K2.5 shapes: latent 512 + rope 64, pages of 64 tokens; each
  // kernel over a bf16 cache and, where it reads one, an fp8 e4m3 cache (half the bytes; "-fp8").
  const int64_t latent = 512, rope = 64, entry = latent + rope, page = 64;
  const float scale = 0.14467962580268923f;
  // The wgmma kernel (Hopper only) runs where the backend would pick it: 64, 128, ... heads; it and
  // the heads-as-M kernel read bf16 only.
  const DeviceCaps caps = query_device_caps();
  for (MlaKernel kernel : {MlaKernel::kWgmma, MlaKernel::kKvMajor, MlaKernel::kTensorCore, MlaKernel::kCudaCore})
    for (bool fp8 : {false, true})
      for (int64_t heads : o.heads)
        for (int64_t B : o.batches)
          for (int64_t ctx : o.contexts) {
            if (fp8 && (kernel == MlaKernel::kTensorCore || kernel == MlaKernel::kWgmma)) continue;
            const std::string name = fmt::format("mla_decode {}{} h{} b{} ctx{}",
                                                 kernel == MlaKernel::kWgmma        ? "wgmma"
                                                 : kernel == MlaKernel::kKvMajor    ? "kvmajor"
                                                 : kernel == MlaKernel::kTensorCore ? "mma"
                                                                                    : "fp32",
                                                 fp8 ? "-fp8" : "", heads, B, ctx);
            if (!wanted(name)) continue;
            if (kernel == MlaKernel::kWgmma &&
                !mla_wgmma_problem(caps.sm, caps.smem_per_block_optin, heads, latent, rope).empty())
              continue;
            const int64_t pages_per_seq = (ctx + page - 1) / page, pages = B * pages_per_seq;
            const int64_t elem = fp8 ? 1 : 2;
            DeviceMem cache(pages * page * entry * elem), q(B * heads * entry * 4), out(B * heads * latent * 4);
            fill_random_cache(cache.p, pages * page * entry, fp8, 3);
            fill_random_f32(q.p, B * heads * entry, 4);
            std::vector<int32_t> table(static_cast<size_t>(pages));
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
            std::vector<TokenInfo> info;
            for (int64_t b = 0; b < B; ++b)
              info.push_back({static_cast<int32_t>(ctx - 1), static_cast<int32_t>(b * pages_per_seq)});
            DeviceMem d_table(table.size() * 4), d_info(info.size() * sizeof(TokenInfo));
            const KvCacheArg kv{cache.p, fp8, fp8 ? 0.5f : 1.0f};
            // One token a sequence, as a decode step (whose TESSERA_MLA_EARLY_KV the rows then follow).
            const MlaDecodeLaunch how = mla_decode_launch(caps.sm, true);
            int sms = 1;
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
            const int64_t chosen = mla_attend_splits(B, heads, ctx, sms, kernel, how.wgmma_pairs);
            cudaMemcpy(d_table.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
            cudaMemcpy(d_info.p, info.data(), info.size() * sizeof(TokenInfo), cudaMemcpyHostToDevice);
            // At batch 1 the context split decides the time; the other counts are timed beside the
            // policy's choice (marked *).
            std::vector<int64_t> split_counts = {chosen};
            if (B == 1)
              for (int64_t s : {16, 32, 64, 128, 256})
                if (s != chosen && s <= ctx / 64) split_counts.push_back(s);
            for (int64_t splits : split_counts) {
              DeviceMem scratch(mla_attend_scratch_floats(B, heads, latent, splits) * 4);
              KernelBenchRow r;
              r.name = fmt::format("{} (splits {}){}", name, splits,
                                   split_counts.size() > 1 && splits == chosen ? " *" : "");
              // Attention and combine over the cache at `c` on stream `st`.
              auto attend = [&](const void* c, cudaStream_t st) {
                launch_mla_attend(q.as<float>(), B, heads, latent, rope, d_info.as<TokenInfo>(), d_table.as<int32_t>(),
                                  KvCacheArg{c, fp8, kv.scale}, pages, page, splits, scale, out.as<float>(),
                                  scratch.as<float>(), kernel, st, nullptr, how);
              };
              r.seconds = time_it(o.iterations, [&] { attend(cache.p, 0); });
              // The bytes read: the cache (2 or 1 a value), q in and the latent output.
              r.bytes = double(B) * ctx * entry * elem + double(B) * heads * (entry + latent) * 4;
              r.flops = 2.0 * B * heads * ctx * (entry + latent);
              report(r);
              // At batch 1 the attention kernel alone (its partials, no combine), timed the same
              // way for every split count: the row above less this one is what the combine adds.
              if (B != 1 || splits == 1 || (kernel != MlaKernel::kKvMajor && kernel != MlaKernel::kWgmma)) continue;
              KernelBenchRow p = r;
              p.name = fmt::format("{} (splits {}) partials only", name, splits);
              float* ml_part = scratch.as<float>() + splits * B * heads * latent;
              p.seconds = time_it(o.iterations, [&] {
                if (kernel == MlaKernel::kWgmma)
                  launch_mla_attend_wgmma_partials(q.as<float>(), B, heads, latent, rope, d_info.as<TokenInfo>(),
                                                   d_table.as<int32_t>(), static_cast<const __nv_bfloat16*>(cache.p),
                                                   pages, page, splits, scale, scratch.as<float>(), ml_part,
                                                   how.wgmma_early, how.wgmma_pairs, 0);
                else
                  launch_mla_attend_kv_major_partials(q.as<float>(), B, heads, latent, rope, d_info.as<TokenInfo>(),
                                                      d_table.as<int32_t>(), kv, page, splits, scale,
                                                      scratch.as<float>(), ml_part, how, 0);
              });
              report(p);
              if (splits != chosen) continue;
              // What a decode step pays a layer: kLayersInStep layers' attention (and combine)
              // recorded in one CUDA graph, each over its own cache, launched as the step launches
              // them (programmatic dependent launch: a kernel's start overlaps the one before), so
              // that neither the launch nor the event timing above is in a layer's time.
              KernelBenchRow g = r;
              g.name = fmt::format("{} (splits {}) a layer of {} in a graph", name, splits, kLayersInStep);
              g.seconds = layer_in_graph_seconds(o.iterations, pages * page * entry, fp8, attend);
              report(g);
            }
          }

  // What a plain read of the same bytes takes, timed the same way (after the memset, the launch
  // included): the ceiling of a batch-1 row at this size, where a launch and a ramp are a large
  // part of the time (issue 19's goals are shares of the copy rate of a 2 GB buffer).
  if (std::find(o.batches.begin(), o.batches.end(), int64_t{1}) != o.batches.end()) {
    // The timing's floor: one round trip of one small kernel (4 KB read), launch included.
    const std::string floor_name = "mla_decode stream b1 4KB (the timing's floor)";
    if (wanted(floor_name)) {
      KernelBenchRow r;
      r.name = floor_name;
      r.seconds = read_stream_seconds(4096, o.iterations);
      r.bytes = 4096;
      report(r);
    }
    for (int64_t ctx : o.contexts) {
      const std::string name = fmt::format("mla_decode stream b1 ctx{} (the bf16 cache's bytes)", ctx);
      if (!wanted(name)) continue;
      const size_t bytes = static_cast<size_t>(ctx * entry * 2);
      KernelBenchRow r;
      r.name = name;
      r.seconds = read_stream_seconds(bytes, o.iterations);
      r.bytes = static_cast<double>(bytes);
      report(r);
    }
  }

  bench_mla_prefill(o, caps, wanted, report);

  // Decode matrix-vector products of one token at Kimi-K2.5's attention shapes, for every K split
  // (the row marked * is launch_gemv's own choice). The weights rotate over copies of >= 256 MB in
  // all, so that each call reads them from memory and not from the 50 MB L2.
  struct GemvCase {
    const char* name;
    int64_t n, n2, k;
    bool norm;
  };
  for (const GemvCase& c :
       {GemvCase{"q_a+kv_a (one launch)", 1536, 576, 7168, false},
        GemvCase{"q_b (q_a norm folded in)", 12288, 0, 1536, true},
        GemvCase{"q_b (without the norm)", 12288, 0, 1536, false}, GemvCase{"o_proj", 7168, 0, 8192, false}}) {
    const std::string base = fmt::format("gemv t1 {} {}x{}", c.name, c.n + c.n2, c.k);
    if (!wanted(base)) continue;
    const int64_t rows = c.n + c.n2, bytes = rows * c.k * 2;
    const int copies = static_cast<int>(std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes));
    std::vector<std::unique_ptr<DeviceMem>> w;
    for (int i = 0; i < copies; ++i) {
      w.push_back(std::make_unique<DeviceMem>(bytes));
      fill_random_bf16(w.back()->p, rows * c.k, 20 + i);
    }
    DeviceMem x(c.k * 4), nw(c.k * 4), out(rows * 4);
    fill_random_f32(x.p, c.k, 11);
    fill_random_f32(nw.p, c.k, 12);
    GemvArgs g{x.as<float>(),         c.k, 0, nullptr, c.k, 0, out.as<float>(), c.n, 0, static_cast<int>(c.k),
               static_cast<int>(c.n), 1};
    if (c.n2 > 0) {
      g.w2_row = c.k;
      g.out2 = out.as<float>() + c.n;
      g.out2_row = c.n2;
      g.n2 = static_cast<int>(c.n2);
    }
    if (c.norm) {
      g.norm_weight = nw.as<float>();
      g.norm_eps = 1e-6f;
    }
    int num_sms = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
    const int chosen = gemv_slices(g, 1, num_sms);
    for (int slices = 1; slices <= 8 && slices <= c.k / 256; slices *= 2) {
      int next = 0;
      KernelBenchRow r;
      r.name = fmt::format("{} (slices {}){}", base, slices, slices == chosen ? " *" : "");
      r.seconds = time_it(o.iterations, [&] {
        GemvArgs a = g;
        a.w = w[static_cast<size_t>(next)]->as<__nv_bfloat16>();
        if (c.n2 > 0) a.w2 = a.w + c.n * c.k;
        next = (next + 1) % copies;
        launch_gemv(a, 1, num_sms, 0, slices);
      });
      r.bytes = static_cast<double>(bytes) + c.k * 4.0 + rows * 4.0;
      r.flops = 2.0 * static_cast<double>(rows) * c.k;
      report(r);
    }
  }

  // The quantized matrix-vector kernel at one token, DeepSeek-V3 FP8's attention projections (q_a and
  // kv_a alone and as one launch's pair) and a Kimi-K2.5 NVFP4 expert's gate + up as a pair, for
  // every K split (* = launch_quant_gemv's choice); weights rotated over >= 256 MB as above.
  struct QuantGemvCase {
    const char* name;
    QuantFormat format;
    int64_t n, n2, k;
  };
  constexpr QuantFormat kFp8 = QuantFormat::kFp8Block, kFp4 = QuantFormat::kNvfp4;
  for (const QuantGemvCase& c :
       {QuantGemvCase{"fp8 q_a", kFp8, 1536, 0, 7168}, QuantGemvCase{"fp8 kv_a", kFp8, 576, 0, 7168},
        QuantGemvCase{"fp8 q_a+kv_a (one launch)", kFp8, 1536, 576, 7168},
        QuantGemvCase{"fp8 q_b", kFp8, 24576, 0, 1536}, QuantGemvCase{"fp8 o_proj", kFp8, 7168, 0, 16384},
        QuantGemvCase{"nvfp4 gate+up (one launch)", kFp4, 2048, 2048, 7168}}) {
    const std::string base = fmt::format("qgemv t1 {} {}x{}", c.name, c.n + c.n2, c.k);
    if (!wanted(base)) continue;
    const bool fp4 = c.format == kFp4;
    const int64_t rows = c.n + c.n2, row_bytes = fp4 ? c.k / 2 : c.k;
    // Scales of one matrix of m rows: NVFP4 an e4m3 byte per 16 values, FP8 an fp32 per 128 x 128.
    auto scale_bytes = [&](int64_t m) { return fp4 ? m * (c.k / 16) : ((m + 127) / 128) * ((c.k + 127) / 128) * 4; };
    const int64_t bytes = rows * row_bytes + scale_bytes(c.n) + scale_bytes(c.n2);
    const int copies = static_cast<int>(std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes));
    std::vector<std::unique_ptr<DeviceMem>> w;
    std::vector<std::pair<QuantMatrix, QuantMatrix>> mats;
    for (int i = 0; i < copies; ++i) {
      w.push_back(std::make_unique<DeviceMem>(bytes));
      auto* p = static_cast<uint8_t*>(w.back()->p);
      fill_random_fp8(p, static_cast<size_t>(rows * row_bytes), 30 + i);  // any bytes decode (no NaN codes)
      auto matrix = [&](uint8_t* data, void* scale, int64_t m) {
        QuantMatrix q;
        q.data = data;
        q.scale = scale;
        q.format = c.format;
        q.n = static_cast<int32_t>(m);
        q.k = static_cast<int32_t>(c.k);
        q.scale_cols = static_cast<int32_t>(fp4 ? c.k / 16 : (c.k + 127) / 128);
        q.global_scale = fp4 ? 0.01f : 1.0f;
        return q;
      };
      uint8_t* scales = p + rows * row_bytes;
      if (fp4)
        fill_random_fp8(scales, static_cast<size_t>(scale_bytes(c.n) + scale_bytes(c.n2)), 40 + i);
      else
        fill_random_f32(scales, static_cast<size_t>((scale_bytes(c.n) + scale_bytes(c.n2)) / 4), 40 + i);
      mats.emplace_back(matrix(p, scales, c.n), matrix(p + c.n * row_bytes, scales + scale_bytes(c.n), c.n2));
    }
    DeviceMem x(c.k * 4), out(rows * 4);
    fill_random_f32(x.p, c.k, 13);
    int num_sms = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
    const int chosen = quant_gemv_slices(rows, num_sms);
    for (int slices = 1; slices <= 8; slices *= 2) {
      int next = 0;
      KernelBenchRow r;
      r.name = fmt::format("{} (slices {}){}", base, slices, slices == chosen ? " *" : "");
      r.seconds = time_it(o.iterations, [&] {
        const auto& [a, b] = mats[static_cast<size_t>(next)];
        next = (next + 1) % copies;
        launch_quant_gemv(a, x.as<float>(), c.k, 1, out.as<float>(), num_sms, 0, c.n2 > 0 ? &b : nullptr,
                          out.as<float>() + c.n, slices);
      });
      r.bytes = static_cast<double>(bytes) + c.k * 4.0 + rows * 4.0;
      r.flops = 2.0 * static_cast<double>(rows) * c.k;
      report(r);
    }
  }

  // The bf16 routed experts on the grouped kernels (launch_moe_grouped_experts: sort, gate/up,
  // finish, down; the matrix-vector kernels take experts of at most kMoeGemvMaxPairs pairs) at
  // Kimi-K2.5's widths (hidden 7168, moe_intermediate 2048, top 8), every expert with its own
  // weights: 64 experts (issue 19's checkpoint; 16 pairs an expert at 128 tokens) and 384 (the real
  // model; ~2.7 at 128), and the shared expert alone (one expert, a slot a token). GB/s counts the
  // weights of the experts the routing touched, the activations and y.
  for (int64_t E : {int64_t{64}, int64_t{384}, int64_t{1}}) {
    const int64_t H = 7168, I = 2048, K = E == 1 ? 0 : 8, per_token = E == 1 ? 1 : K, per_expert = 3 * H * I;
    auto name_of = [&](int64_t T) {
      return E == 1 ? fmt::format("moe grouped bf16 shared expert t{} h{} i{}", T, H, I)
                    : fmt::format("moe grouped bf16 e{} t{} top{} h{} i{}", E, T, K, H, I);
    };
    std::vector<int64_t> token_counts;
    for (int64_t T : {int64_t{16}, int64_t{128}, int64_t{256}})
      if (wanted(name_of(T))) token_counts.push_back(T);
    if (token_counts.empty()) continue;
    // The experts' weights, filled once for every token count.
    size_t free_bytes = 0, total_bytes = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double need = static_cast<double>(E * per_expert) * 2;
    if (need > 0.9 * static_cast<double>(free_bytes)) {
      for (int64_t T : token_counts)
        fmt::print("{:<52} skipped: its weights need {:.1f} GB, {:.1f} GB free\n", name_of(T), need / 1e9,
                   free_bytes / 1e9);
      continue;
    }
    DeviceMem weights(static_cast<size_t>(E * per_expert) * 2), table(3 * E * 8);
    fill_random_bf16(weights.p, static_cast<size_t>(E * per_expert), 12);
    std::vector<const __nv_bfloat16*> ptrs(static_cast<size_t>(3 * E));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t m = 0; m < 3; ++m)
        ptrs[static_cast<size_t>(m * E + e)] = weights.as<__nv_bfloat16>() + e * per_expert + m * H * I;
    TESSERA_CUDA_CHECK(cudaMemcpy(table.p, ptrs.data(), ptrs.size() * 8, cudaMemcpyHostToDevice));
    auto* tab = table.as<const __nv_bfloat16*>();
    for (int64_t T : token_counts) {
      const int64_t P = T * per_token;
      DeviceMem x(T * H * 4), xb(T * H * 2), meta((2 * E + 2 + P) * 4), act(P * I * 2), y(P * H * 4),
          part(2 * moe_grouped_part_splits(T, P, H, I, E) * P * I * 4), ids(std::max<int64_t>(P, 1) * 4),
          wts(std::max<int64_t>(P, 1) * 4);
      fill_random_f32(x.p, T * H, 13);
      // Distinct experts a token, uniformly at random (a trained router's load is less even).
      std::vector<int32_t> host_ids;
      std::vector<float> host_wts;
      std::vector<bool> touched(static_cast<size_t>(E), E == 1);
      std::mt19937_64 rng(14);
      for (int64_t t = 0; t < T && K > 0; ++t) {
        std::vector<int32_t> all(static_cast<size_t>(E));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        for (int64_t k = 0; k < K; ++k) {
          host_ids.push_back(all[static_cast<size_t>(k)]);
          host_wts.push_back(0.1f);
          touched[static_cast<size_t>(all[static_cast<size_t>(k)])] = true;
        }
      }
      if (K > 0) {
        TESSERA_CUDA_CHECK(cudaMemcpy(ids.p, host_ids.data(), host_ids.size() * 4, cudaMemcpyHostToDevice));
        TESSERA_CUDA_CHECK(cudaMemcpy(wts.p, host_wts.data(), host_wts.size() * 4, cudaMemcpyHostToDevice));
      }
      const MoeSlots slots{ids.as<int32_t>(), wts.as<float>(), static_cast<int>(K), E == 1 ? 0 : -1};
      auto* m = meta.as<int32_t>();
      const MoeGroupedScratch scratch{
          xb.as<__nv_bfloat16>(), m, m + E + 1, m + 2 * E + 1, m + 2 * E + 2, act.as<__nv_bfloat16>(), y.as<float>(),
          part.as<float>()};
      KernelBenchRow r;
      r.name = name_of(T);
      r.seconds = time_it(o.iterations, [&] {
        launch_moe_grouped_experts(x.as<float>(), T, H, slots, E, tab, tab + E, tab + 2 * E, I, scratch, 0);
      });
      const double used = static_cast<double>(std::count(touched.begin(), touched.end(), true));
      r.bytes = used * per_expert * 2 + T * H * 4.0 + P * H * 4.0;
      r.flops = 2.0 * P * per_expert;
      report(r);
    }
  }
  // RMSNorm over a hidden state of 7168 (decode batch 128).
  if (wanted("rms_norm")) {
    const int64_t T = 128, H = 7168;
    DeviceMem x(T * H * 4), w(H * 4), y(T * H * 4);
    fill_random_f32(x.p, T * H, 6);
    fill_random_f32(w.p, H, 7);
    KernelBenchRow r;
    r.name = "rms_norm t128 h7168 (fp32)";
    r.seconds = time_it(o.iterations,
                        [&] { launch_rms_norm(x.as<float>(), T, H, 0, w.as<float>(), H, 1e-6f, y.as<float>(), H, 0); });
    r.bytes = 2.0 * T * H * 4 + H * 4;
    report(r);
  }
  // The decode router (Kimi-K2.5: 384 experts x 7168, top 8, one group): logits and the top-k
  // selection in one launch (launch_router_fused), at 1 and at its largest step, 8 tokens.
  for (int64_t T : {int64_t{1}, kRouterKernelMaxTokens}) {
    const std::string name = fmt::format("router t{} e384 h7168 top8 (logits + select, one launch)", T);
    if (!wanted(name)) continue;
    const int64_t E = 384, H = 7168, K = 8;
    DeviceMem x(T * H * 4), w(E * H * 2), l(T * E * 4), bias(E * 4), ids(T * K * 4), wts(T * K * 4), done(4);
    fill_random_f32(x.p, T * H, 8);
    fill_random_bf16(w.p, E * H, 9);
    fill_random_f32(bias.p, E, 10);
    TESSERA_CUDA_CHECK(cudaMemset(done.p, 0, 4));  // the kernel resets it after each call
    KernelBenchRow r;
    r.name = name;
    r.seconds = time_it(o.iterations, [&] {
      launch_router_fused(x.as<float>(), T, H, w.as<__nv_bfloat16>(), E, l.as<float>(), bias.as<float>(), K, 1, 1, true,
                          2.827f, ids.as<int32_t>(), wts.as<float>(), static_cast<unsigned*>(done.p), 0);
    });
    r.bytes = double(E) * H * 2 + double(T) * H * 4;
    r.flops = 2.0 * T * E * H;
    report(r);
  }
  // Sampling (Ops::sample) over Kimi-K2.5's vocabulary of 163840: plain temperature (argmax, total
  // mass, draw: 3 passes over a row) and DeepSeek's recommended temperature 0.6 with top-p 0.95 (4
  // more radix passes), each with the blocks a row gets (*) and with one block a row. Logits shaped
  // like a model's: a wide body (sd 2.5) and 16 likely tokens (10 to 18) a row, so that top-p keeps
  // few. GB/s counts the logits once.
  for (int64_t B : {int64_t{1}, int64_t{16}, int64_t{128}})
    for (bool top_p : {false, true}) {
      const int64_t V = 163840;
      const std::string base = fmt::format("sample b{} v{} {}", B, V, top_p ? "t0.6 top_p0.95" : "t1");
      if (!wanted(base)) continue;
      DeviceMem logits(B * V * 4), ids(B * 4), params(B * sizeof(SampleRow));
      {
        std::mt19937_64 rng(11);
        std::normal_distribution<float> body(0.0f, 2.5f);
        std::uniform_real_distribution<float> peak(10.0f, 18.0f);
        std::uniform_int_distribution<int64_t> id(0, V - 1);
        std::vector<float> h(static_cast<size_t>(B * V));
        for (auto& v : h) v = body(rng);
        for (int64_t b = 0; b < B; ++b)
          for (int j = 0; j < 16; ++j) h[static_cast<size_t>(b * V + id(rng))] = peak(rng);
        cudaMemcpy(logits.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
      }
      std::vector<SampleRow> host(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b)
        host[b] = top_p ? SampleRow{0.6f, 0, 0.95f, 0.37 + 0.001 * b} : SampleRow{1.0f, 0, 1.0f, 0.37 + 0.001 * b};
      cudaMemcpy(params.p, host.data(), host.size() * sizeof(SampleRow), cudaMemcpyHostToDevice);
      const int chosen = sample_blocks_per_row(B, caps.sm, caps.num_sms);
      // The blocks a row gets and one block, in 4 passes over a row (the default); with top-p also
      // the 7 passes of TESSERA_SAMPLE_FEWER_PASSES=0.
      std::vector<std::pair<int, bool>> variants = {{chosen, true}};
      if (chosen != 1) variants.emplace_back(1, true);
      if (top_p) variants.emplace_back(chosen, false);
      for (auto [per_row, fewer] : variants) {
        KernelBenchRow r;
        r.name = fmt::format("{} (blocks {}{}){}", base, per_row, fewer ? "" : ", 7 passes",
                             per_row == chosen && fewer ? " *" : "");
        r.seconds = time_it(o.iterations, [&] {
          launch_sample(logits.as<float>(), B, V, params.as<SampleRow>(), ids.as<int32_t>(), nullptr, per_row, fewer,
                        0);
        });
        r.bytes = static_cast<double>(B) * V * 4;
        report(r);
      }
    }
  return rows;
}

}  // namespace tessera::ops::cuda
