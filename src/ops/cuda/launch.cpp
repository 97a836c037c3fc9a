#include <cstdlib>
#include <string_view>

#include <cuda_runtime.h>

namespace tessera::ops::cuda {

// Declared in launch.cuh (a CUDA header: its launch template needs nvcc).
bool pdl_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("TESSERA_PDL");
    if (env != nullptr && std::string_view(env) == "0") return false;
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
