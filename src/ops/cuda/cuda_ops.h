// The CUDA backend. Activations are fp32 in device memory; weights are bf16 on the device
// (FP8 and NVFP4 checkpoints are dequantized to bf16 at load for now); GEMMs run through cuBLASLt
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
// Name and compute capability of device 0, e.g. "NVIDIA H200 (sm_90)".
std::string device_description();

// Creates the backend on device 0; throws core::Error when there is no usable GPU.
// `kernels`: forced kernels, "op=kernel[,op=kernel...]" (see kernel_registry.h); "" = the
// registry's choice, or the TESSERA_KERNELS environment variable when set.
std::unique_ptr<Ops> make_cuda_ops(const std::string& kernels = "");

// The raw bytes of a device tensor (tests: fp8 KV pages are U8), after the legacy stream's work.
std::vector<uint8_t> device_bytes(const core::Tensor& t);

// A bf16 device tensor of deterministic pseudo-random values in [-scale, scale) (synthetic models).
core::Tensor random_bf16_tensor(core::Shape shape, float scale, uint64_t seed);

}  // namespace tessera::ops::cuda
