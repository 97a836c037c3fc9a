// NVFP4 codes into the device layout the kernels decode (mma_pairs.h): each 32-bit word mapped
// where it lies, at load. A thread a word; the map (the XOR of up to 32 constant columns) is ~100
// integer instructions a word, well under a second for a GPU's share of Kimi-K2.5.
#include <algorithm>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/kernels/quant/mma_pairs.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

__global__ void nvfp4_device_layout_kernel(const uint32_t* src, uint32_t* dst, int64_t words) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride)
    dst[i] = mma_pairs::nvfp4_device_word(src[i]);
}

}  // namespace

void launch_nvfp4_device_layout(const uint8_t* src, uint8_t* dst, int64_t bytes, cudaStream_t s) {
  if (bytes == 0) return;
  const int64_t words = bytes / 4;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((words + 255) / 256, 65536));
  launch_plain(nvfp4_device_layout_kernel, dim3(blocks), 256, 0, s, reinterpret_cast<const uint32_t*>(src),
               reinterpret_cast<uint32_t*>(dst), words);
}

}  // namespace tessera::ops::cuda
