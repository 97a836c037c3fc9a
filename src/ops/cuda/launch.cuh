// Programmatic dependent launch (sm_90+): a kernel launched with launch_dependent() may be
// scheduled while the kernel before it in the stream is still finishing, so the launch latency and
// the block ramp overlap that kernel's tail instead of sitting between the two (a decode step is
// ~20 short kernels a layer). The early kernel must not touch memory before pdl_wait(), which
// returns once the previous kernel has completed and its writes are visible: every kernel launched
// this way calls it first. Kernels without it keep ordinary launches. TESSERA_PDL=0 turns it off.
#pragma once

#include <cuda_runtime.h>

namespace tessera::ops::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Device 0 is sm_90+ and TESSERA_PDL is not "0" (decided once).
bool pdl_enabled();

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args... args) {
  if (!pdl_enabled()) {
    kernel<<<grid, block, smem, stream>>>(static_cast<Params>(args)...);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  // Errors surface through cudaGetLastError like those of <<<>>> launches.
  (void)cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace tessera::ops::cuda
