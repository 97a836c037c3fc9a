// The CUDA backend. Activations are fp32 in device memory; weights are bf16 on the device
// (FP8 and NVFP4 checkpoints are dequantized to bf16 at load; the quantized-weights issue keeps
// them quantized); GEMMs run through cuBLASLt
// with bf16 inputs and fp32 accumulation; the latent KV cache is bf16 or fp8 e4m3. This header
// does not include CUDA headers, so plain C++ code can create the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/ops.h"

namespace tessera::ops::cuda {

// True when a CUDA device is present and usable (tests skip themselves otherwise).
bool cuda_available();
// The number of usable CUDA devices (0 without a driver or a device).
int cuda_device_count();
// Name and compute capability of device `index`, e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
std::string device_description(int index = 0);
// Device `index`'s free memory once this process's pool has given its cached blocks back, so that
// two readings differ by what was allocated and is still held between them (the collectives'
// measurement, ops::choose_collectives), not by what the pool happened to keep.
uint64_t free_device_bytes_uncached(int index);

// Creates the backend on CUDA device `device`; throws core::Error when there is no such usable GPU.
// `kernels`: forced kernels, "op=kernel[,op=kernel...]" (see kernel_registry.h); "" = the
// registry's choice, or the TESSERA_KERNELS environment variable when set. Each op runs the kernel
// that kernel_registry.h's choosers pick for its shapes on this device: what `tessera plan` prints.
// `step_graphs`: decode steps run as CUDA graphs (Ops::graphed_step, step_graph.h) unless false
// (--enforce-eager) or TESSERA_CUDA_GRAPHS=0.
std::unique_ptr<Ops> make_cuda_ops(const std::string& kernels = "", bool step_graphs = true, int device = 0);

// The stream a CUDA backend issues all of its work on (a cudaStream_t), for work that must be
// ordered with it (collectives); throws for another backend.
void* backend_stream(Ops& ops);

// Makes the backend's device current on the calling thread (cudaSetDevice): a tensor-parallel rank's
// thread calls it before it loads or runs that rank, on a GPU of its own. Throws for another backend.
void make_current(Ops& ops);

// How the CUDA backend's decode steps ran (step_graph.h); all zero for other backends.
struct StepGraphStats {
  int64_t eager = 0;               // steps run as usual: first sight of a key, or a key that cannot be captured
  int64_t recorded = 0;            // steps captured into a graph (and launched)
  int64_t replayed = 0;            // steps that launched a recorded graph
  int64_t stale = 0;               // replays refused because the step's operations differed from the recording
  double replay_host_seconds = 0;  // host time of the replays' checking passes (the GPU waits for it)
};
StepGraphStats step_graph_stats(const Ops& ops);
// Whether make_cuda_ops(..., step_graphs) records decode steps: step_graphs, unless
// TESSERA_CUDA_GRAPHS=0 or TESSERA_DEVICE_POOL=exact (whose cudaFree a capture cannot contain).
bool step_graphs_enabled(bool step_graphs);

// The raw bytes of a device tensor (tests: fp8 KV pages are U8), after the legacy stream's work.
std::vector<uint8_t> device_bytes(const core::Tensor& t);

// A bf16 device tensor of deterministic pseudo-random values in [-scale, scale) (synthetic models).
core::Tensor random_bf16_tensor(core::Shape shape, float scale, uint64_t seed);
// A U8 device tensor of deterministic pseudo-random bytes, each (random & and_mask) | or_mask
// (quantized weights of synthetic models).
core::Tensor random_bytes_tensor(core::Shape shape, uint8_t and_mask, uint8_t or_mask, uint64_t seed);

}  // namespace tessera::ops::cuda
