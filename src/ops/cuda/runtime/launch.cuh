// Programmatic dependent launch (sm_90+): a kernel launched with launch_dependent() may be
// scheduled while the kernel before it in the stream is still running, so the launch latency, the
// block ramp and the first loads of constant data overlap that kernel's tail instead of sitting
// between the two (a decode step is ~20 short kernels a layer). Every kernel launched this way
// calls pdl_wait() before it touches memory that earlier kernels write (activations, the cache,
// routing): it returns once the previous kernel has completed and its writes are visible. Only
// weights, which no kernel writes, may be read before it (the matrix-vector kernels start
// streaming theirs there), and no block may return before it: a grid that completed before the
// kernel it depends on would let the next kernel's wait return too early
// (tests/ops/pdl_launch_rules_test.cpp scans the kernels for both rules). pdl_wait() then lets the next kernel be
// scheduled: its blocks may take free SM slots while this one runs. Kernels without it keep ordinary launches.
// TESSERA_PDL=0 turns it off.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

// `release_dependents` false: the next kernel is scheduled only as this one's blocks finish (where
// its blocks, waiting early on the SMs, took slots this kernel's later blocks need: the KV-major MLA
// decode kernel's early start, docs/PERFORMANCE.md).
__device__ __forceinline__ void pdl_wait(bool release_dependents = true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // After the wait, not before: the next kernel's blocks then never hold SM slots while the kernel
  // before this one still runs.
  if (release_dependents) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#else
  (void)release_dependents;
#endif
}

// Device 0 is sm_90+ and TESSERA_PDL is not "0" (decided once).
bool pdl_enabled();

// Lets `kernel` take `bytes` of dynamic shared memory on the current device (above the 48 KB
// default). The attribute is per device, so it is raised once per (kernel, device), under a lock:
// tensor-parallel ranks launch from several threads and, in one process, onto several devices.
void allow_dynamic_smem(const void* kernel, int bytes);
template <class... Params>
void allow_dynamic_smem(void (*kernel)(Params...), int bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// Whether a launch is to be issued (launch_gate.h): always, unless a recorded step is being
// replayed, when it is only checked against the recording. Each struct argument type has an
// add_fields overload (kernels.h) that lists its fields.
template <class T>
void add_argument(Signature& s, const T& v) {
  if constexpr (std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>)
    s.add(v);
  else
    add_fields(s, v);
}
template <typename... Params, typename... Args>
bool admit_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
                  const Args&... args) {
  return admit([&](Signature& s) {
    s.add(reinterpret_cast<const void*>(kernel));
    for (unsigned v : {grid.x, grid.y, grid.z, block.x, block.y, block.z, cluster.x, cluster.y, cluster.z}) s.add(v);
    s.add(smem);
    s.add(stream);
    (add_argument(s, static_cast<std::remove_cv_t<std::remove_reference_t<Params>>>(args)), ...);
  });
}

// An ordinary launch (kernel<<<grid, block, smem, stream>>>) through the replay check.
template <typename... Params, typename... Args>
void launch_plain(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  if (!admit_launch(kernel, grid, block, smem, stream, dim3(1, 1, 1), args...)) return;
  kernel<<<grid, block, smem, stream>>>(static_cast<Params>(args)...);
}

// A launch with programmatic stream serialization (when `pdl`) and, where `cluster` holds more than
// one block, clusters of that shape (sm_90+: their blocks are scheduled together and share their
// shared memory, cooperative_groups::this_cluster()).
template <typename... Params, typename... Args>
void launch_with_attributes(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            bool pdl, dim3 cluster, Args... args) {
  const bool clustered = cluster.x * cluster.y * cluster.z > 1;
  if (!pdl && !clustered) {
    kernel<<<grid, block, smem, stream>>>(static_cast<Params>(args)...);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  if (pdl) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (clustered) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster.x;
    attribute[n].val.clusterDim.y = cluster.y;
    attribute[n++].val.clusterDim.z = cluster.z;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  // Errors surface through cudaGetLastError like those of <<<>>> launches.
  (void)cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// launch_dependent in clusters of shape `cluster` (each grid dimension a multiple of its size).
template <typename... Params, typename... Args>
void launch_dependent_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              dim3 cluster, Args... args) {
  if (!admit_launch(kernel, grid, block, smem, stream, cluster, args...)) return;
  launch_with_attributes(kernel, grid, block, smem, stream, pdl_enabled(), cluster, args...);
}

// A dependent launch of single blocks (launch.cuh's head comment).
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args... args) {
  launch_dependent_cluster(kernel, grid, block, smem, stream, dim3(1, 1, 1), args...);
}

// An ordinary launch (no programmatic serialization) in clusters of shape `cluster`:
// for kernels whose blocks are too large to sit on an SM waiting for the kernel before them (a
// waiting 1024-thread block holds what that kernel's next blocks need).
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
                    Args... args) {
  if (!admit_launch(kernel, grid, block, smem, stream, cluster, args...)) return;
  launch_with_attributes(kernel, grid, block, smem, stream, false, cluster, args...);
}

}  // namespace tessera::ops::cuda
