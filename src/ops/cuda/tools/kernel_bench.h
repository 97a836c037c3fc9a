// `tessera bench kernels`: measures, in one run on the GPU at hand, the ceilings (device copy
// bandwidth, bf16 GEMM rate) and then each kernel's achieved bandwidth or FLOP rate as a fraction
// of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::ops::cuda {

struct KernelBenchOptions {
  std::vector<int64_t> batches = {1, 16, 128};
  std::vector<int64_t> contexts = {1024, 8192, 32768};
  std::vector<int64_t> heads = {64, 8};  // per GPU, Kimi-K2.5 (64 total; 8 with TP=8)
  int iterations = 20;
  std::string filter;  // run only benchmarks whose name contains this
};

struct KernelBenchRow {
  std::string name;
  double seconds = 0;  // per call
  double bytes = 0;    // moved per call (the floor)
  double flops = 0;    // per call
};

// Device-to-device copy bandwidth (bytes read + written per second), median of `iterations`
// copies of `bytes`: the memory ceiling every bandwidth number is compared with.
double measure_copy_bandwidth(size_t bytes, int iterations);
// cuBLASLt's bf16 GEMM rate at 8192^3 in TFLOP/s, median of `iterations`: the arithmetic ceiling.
double measure_gemm_tflops(int iterations);
// Waits for all work on the device (benchmarks time whole steps with the host clock).
void synchronize_device();

// Prints a table and returns the rows (for docs/PERFORMANCE.md).
std::vector<KernelBenchRow> run_kernel_benchmarks(const KernelBenchOptions& options);

}  // namespace tessera::ops::cuda
