// tessera bench kernels: GPU kernel throughput against the ceilings measured in the same run.
#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/tools/kernel_bench.h"
#endif

namespace tessera::cli {
namespace {

struct KernelArgs {
  std::vector<int64_t> batches = {1, 16, 128};
  std::vector<int64_t> contexts = {1024, 8192, 32768};
  std::vector<int64_t> heads = {64, 8};
  int iterations = 20;
  std::string filter;
};

int run(const KernelArgs& a) {
#ifdef TESSERA_HAVE_CUDA
  ops::cuda::KernelBenchOptions o;
  o.batches = a.batches;
  o.contexts = a.contexts;
  o.heads = a.heads;
  o.iterations = a.iterations;
  o.filter = a.filter;
  ops::cuda::run_kernel_benchmarks(o);
  return 0;
#else
  (void)a;
  core::fail("bench kernels: this build of tessera has no CUDA backend (configure with the 'release' preset where nvcc is installed)");
#endif
}

CommandRegistration reg{{"kernels", "GPU kernels: achieved GB/s and TFLOP/s next to the measured copy and GEMM ceilings",
                         [](CLI::App& app) {
                           auto a = std::make_shared<KernelArgs>();
                           app.add_option("--batch", a->batches, "decode batch sizes")->capture_default_str();
                           app.add_option("--context", a->contexts, "context lengths")->capture_default_str();
                           app.add_option("--heads", a->heads, "attention heads per GPU")->capture_default_str();
                           app.add_option("--iterations", a->iterations, "timed calls per kernel (median reported)")
                               ->capture_default_str();
                           app.add_option("--filter", a->filter, "only kernels whose name contains this");
                           return [a] { return run(*a); };
                         },
                         "bench"}};

}  // namespace
}  // namespace tessera::cli
