// The CUDA backend. Activations are fp32 in device memory; weights are bf16 on the device
// (FP8 and NVFP4 checkpoints are dequantized to bf16 at load for now); GEMMs run through cuBLASLt
// with bf16 inputs and fp32 accumulation; the latent KV cache is bf16. This header does not
// include CUDA headers, so plain C++ code can create the backend.
#pragma once

#include <memory>

#include "ops/ops.h"

namespace tessera::ops::cuda {

// True when a CUDA device is present and usable (tests skip themselves otherwise).
bool cuda_available();
// Name and compute capability of device 0, e.g. "NVIDIA H200 (sm_90)".
std::string device_description();

// Creates the backend on device 0; throws core::Error when there is no usable GPU.
// `mla_kernel`: "auto" (tensor cores where the shape allows), "mma" or "cuda-core"; "auto" also
// honours the TESSERA_MLA_KERNEL environment variable.
std::unique_ptr<Ops> make_cuda_ops(const std::string& mla_kernel = "auto");

}  // namespace tessera::ops::cuda
