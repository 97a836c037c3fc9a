#include "ops/cuda/runtime/pinned_staging.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
constexpr size_t kAlign = 256;
constexpr size_t kMinBlock = size_t{1} << 20;
}  // namespace

PinnedStaging::~PinnedStaging() {
  for (auto& b : blocks_) cudaFreeHost(b.data);
}

void* PinnedStaging::stage(const void* src, size_t bytes) {
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  if (blocks_.empty() || blocks_.back().size - blocks_.back().used < need) {
    // The full block may still be read by queued copies: start another one.
    Block b;
    b.size = std::max(kMinBlock, 2 * need);
    TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&b.data), b.size, cudaHostAllocDefault));
    blocks_.push_back(b);
  }
  Block& b = blocks_.back();
  char* dst = b.data + b.used;
  if (bytes > 0) std::memcpy(dst, src, bytes);
  b.used += need;
  return dst;
}

void PinnedStaging::recycle() {
  if (blocks_.size() > 1) {
    size_t total = 0;
    for (auto& b : blocks_) {
      total += b.size;
      TESSERA_CUDA_CHECK(cudaFreeHost(b.data));
    }
    blocks_.clear();
    Block b;
    b.size = total;
    TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&b.data), b.size, cudaHostAllocDefault));
    blocks_.push_back(b);
  }
  if (!blocks_.empty()) blocks_.back().used = 0;
}

}  // namespace tessera::ops::cuda
