#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>

#include "core/env.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

StepTape*& active_tape() {
  thread_local StepTape* tape = nullptr;
  return tape;
}

bool ab_switch_on(const char* name) { return core::env_switch_on(name); }

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
