// tessera bench kernels: GPU kernel throughput against the ceilings measured in the same run; with
// --cases, the backend conformance table's cases (ops/conformance/op_cases.h) in perf mode, once per
// kernel the registry can run for each, exactly as the backend tests check them.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "ops/conformance/perf.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/tools/case_variants.h"
#include "ops/cuda/tools/kernel_bench.h"
#include "ops/cuda/tools/kernel_trace.h"
#endif

namespace tessera::cli {
namespace {

namespace conf = ops::conformance;

struct KernelArgs {
  std::vector<int64_t> batches = {1, 16, 128};
  std::vector<int64_t> contexts = {1024, 8192, 32768};
  std::vector<int64_t> heads = {64, 8};
  int iterations = 20;
  std::string filter;
  std::string cases;  // shape families of the conformance table, comma-separated; empty: the kernel benchmarks
  std::string device = "cuda";
  bool device_clock = false;  // with --cases: each case timed on the device's clock too
};

std::vector<std::string> split_families(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string f; std::getline(in, f, ',');) {
    if (f.empty()) core::fail("--cases '{}': an empty family name", text);
    if (f == "all") return {};
    out.push_back(f);
  }
  return out;
}

// One row: the case, the kernel, the median time and, where the case declares its bytes or FLOPs,
// the achieved rate next to the ceiling (0: none measured, as on the CPU).
void print_row(const conf::OpCase& c, const std::string& kernel, const conf::CaseTiming& t, double copy_bw,
               double gemm_tflops) {
  std::string rate;
  if (t.bytes > 0) {
    const double gbs = t.bytes / t.seconds / 1e9;
    rate += copy_bw > 0 ? fmt::format("  {:8.1f} GB/s ({:5.1f}% of copy)", gbs, 100 * gbs * 1e9 / copy_bw)
                        : fmt::format("  {:8.1f} GB/s", gbs);
  }
  if (t.flops > 0) {
    const double tf = t.flops / t.seconds / 1e12;
    rate += gemm_tflops > 0 ? fmt::format("  {:7.2f} TFLOP/s ({:5.1f}% of GEMM)", tf, 100 * tf / gemm_tflops)
                            : fmt::format("  {:7.3f} TFLOP/s", tf);
  }
  if (t.device_seconds > 0) {
    rate += fmt::format("  | device {:8.2f} us", t.device_seconds * 1e6);
    if (t.bytes > 0 && copy_bw > 0)
      rate += fmt::format(" ({:5.1f}% of copy)", 100 * t.bytes / t.device_seconds / copy_bw);
  }
  fmt::print("{:<18} {:<12} {:<70} {:<16} {:10.2f} us{}\n", c.op, c.family, c.shape_name, kernel, t.seconds * 1e6,
             rate);
}

int run_cases(const KernelArgs& a) {
  std::vector<conf::OpCase> cases = conf::op_cases(split_families(a.cases));
  std::erase_if(cases, [&](const conf::OpCase& c) { return c.id().find(a.filter) == std::string::npos; });
  if (cases.empty()) core::fail("--filter '{}': no case of --cases {} matches", a.filter, a.cases);
  double copy_bw = 0, gemm = 0;
  if (a.device == "cpu") {
    fmt::print("device: cpu (fp32 reference backend); no ceiling measured\n");
    for (const auto& c : cases) {
      ops::cpu::CpuOps cpu;
      print_row(c, "reference", conf::time_case(c, conf::host_target(cpu), a.iterations, [] {}), 0, 0);
    }
    return 0;
  }
#ifdef TESSERA_HAVE_CUDA
  fmt::print("device: {}\n", ops::cuda::device_description());
  copy_bw = ops::cuda::measure_copy_bandwidth(size_t{2} << 30, a.iterations);
  gemm = ops::cuda::measure_gemm_tflops(a.iterations);
  fmt::print("ceiling: device copy {:.0f} GB/s (read + write), bf16 GEMM 8192^3 {:.0f} TFLOP/s\n", copy_bw / 1e9, gemm);
  const auto caps = ops::cuda::query_device_caps();
  conf::DeviceClock device_clock;
  if (a.device_clock)
    device_clock = [](const std::function<void()>& calls) {
      ops::cuda::KernelTrace trace;
      calls();
      return static_cast<double>(ops::cuda::busy_ns(trace.stop())) * 1e-9;
    };
  for (const auto& c : cases) {
    std::vector<std::string> skipped;
    for (const auto& v : ops::cuda::case_variants(c, caps, skipped)) {
      auto gpu = ops::cuda::make_cuda_ops(v.spec);
      print_row(
          c, v.label,
          conf::time_case(
              c, ops::cuda::cuda_target(*gpu), a.iterations, [] { ops::cuda::synchronize_device(); }, device_clock),
          copy_bw, gemm);
    }
  }
  return 0;
#else
  (void)copy_bw, (void)gemm;
  core::fail(
      "bench kernels --device cuda: this build of tessera has no CUDA backend (use --device cpu, or configure "
      "with the 'release' preset where nvcc is installed)");
#endif
}

int run(const KernelArgs& a) {
  if (a.device != "cuda" && a.device != "cpu") core::fail("--device {}: expected cuda or cpu", a.device);
  if (a.device_clock && (a.cases.empty() || a.device != "cuda"))
    core::fail("--device-clock: only with --cases on --device cuda (the kernel benchmarks time the device already)");
  if (!a.cases.empty()) return run_cases(a);
  if (a.device == "cpu") core::fail("--device cpu: only with --cases (the kernel benchmarks are CUDA kernels)");
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
  core::fail(
      "bench kernels: this build of tessera has no CUDA backend (configure with the 'release' preset where nvcc is "
      "installed)");
#endif
}

CommandRegistration reg{
    {"kernels", "GPU kernels: achieved GB/s and TFLOP/s next to the measured copy and GEMM ceilings",
     [](CLI::App& app) {
       auto a = std::make_shared<KernelArgs>();
       app.add_option("--batch", a->batches, "decode batch sizes")->capture_default_str();
       app.add_option("--context", a->contexts, "context lengths")->capture_default_str();
       app.add_option("--heads", a->heads, "attention heads per GPU")->capture_default_str();
       app.add_option("--iterations", a->iterations, "timed calls per kernel (median reported)")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       app.add_option("--filter", a->filter,
                      "only kernels (with --cases: cases, by 'op/family/shape') whose name "
                      "contains this");
       app.add_option("--cases", a->cases,
                      "time the backend conformance cases of these shape families instead "
                      "(comma-separated: tiny, ragged, kimi-k2.5, deepseek-v3, or all), once "
                      "per kernel the registry can run for each");
       app.add_option("--device", a->device, "cuda, or cpu (with --cases: the fp32 reference)")->capture_default_str();
       app.add_flag("--device-clock", a->device_clock,
                    "with --cases on cuda: time each case on the device's clock too (its kernels' busy time, "
                    "through CUPTI), without the host's launch costs that a loop of short kernels measures");
       return [a] { return run(*a); };
     },
     "bench"}};

}  // namespace
}  // namespace tessera::cli
