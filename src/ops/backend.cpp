#include "ops/backend.h"

#include <spdlog/spdlog.h>

#include <charconv>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tessera::ops {

std::unique_ptr<Ops> make_backend(const std::string& device, const std::string& kernels, bool enforce_eager) {
  if (device == "cpu") {
    if (!kernels.empty())
      core::fail("--kernels '{}': kernel choices apply to --device cuda; the cpu backend has one kernel per op",
                 kernels);
    return std::make_unique<cpu::CpuOps>();
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      const char* begin = device.data() + 5;
      const auto [end, ec] = std::from_chars(begin, device.data() + device.size(), index);
      if (ec != std::errc() || end != device.data() + device.size() || index < 0)
        core::fail("--device '{}': expected cuda or cuda:N with N a device index", device);
    }
#ifdef TESSERA_HAVE_CUDA
    auto ops = cuda::make_cuda_ops(kernels, !enforce_eager, index);
    spdlog::info("backend: cuda:{} on {}", index, cuda::device_description(index));
    return ops;
#else
    (void)enforce_eager;
    core::fail(
        "--device {}: this build of tessera has no CUDA backend (nvcc was not found at configure time, "
        "or TESSERA_CUDA=OFF); rebuild with the 'release' preset on a machine with the CUDA toolkit",
        device);
#endif
  }
  core::fail("--device '{}': expected cpu, cuda or cuda:N", device);
}

}  // namespace tessera::ops
