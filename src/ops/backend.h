// The backend a --device names. The one place that knows every backend (ops.h is the contract they
// implement; cpu/ and cuda/ implement it).
#pragma once

#include <memory>
#include <string>

#include "ops/ops.h"

namespace tessera::ops {

// "cpu" (the fp32 reference backend) or "cuda[:N]" (CUDA device N, default 0), with --kernels
// overrides (CUDA only) and decode steps as CUDA graphs unless `enforce_eager`; throws core::Error
// naming the flag when the device is unknown or unavailable in this build.
std::unique_ptr<Ops> make_backend(const std::string& device, const std::string& kernels = "",
                                  bool enforce_eager = false);

}  // namespace tessera::ops
