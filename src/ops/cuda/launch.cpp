#include <cstdlib>
#include <string_view>

#include <cuda_runtime.h>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_gate.h"

namespace tessera::ops::cuda {

StepTape*& active_tape() {
  thread_local StepTape* tape = nullptr;
  return tape;
}

bool ab_switch_on(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::string_view(env) != "0";
}

// Declared in launch.cuh (a CUDA header: its launch template needs nvcc).
bool pdl_enabled() {
  static const bool enabled = [] {
    if (!ab_switch_on("TESSERA_PDL")) return false;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace tessera::ops::cuda
