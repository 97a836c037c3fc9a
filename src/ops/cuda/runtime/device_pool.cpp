#include "ops/cuda/runtime/device_pool.h"

#include <bit>
#include <cstdlib>
#include <string_view>

#include "core/env.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
size_t bucket(size_t bytes) { return std::bit_ceil(std::max<size_t>(bytes, 512)); }

}  // namespace

// TESSERA_DEVICE_POOL=exact: every tensor is its own cudaMalloc of exactly its size, freed (with a
// device sync) when released, so that compute-sanitizer sees an access past a tensor's end instead
// of the slack of a power-of-two block or a block reused by another tensor. Debugging only: slow.
bool DevicePool::exact_mode() {
  static const bool exact = [] { return core::env_value("TESSERA_DEVICE_POOL") == "exact"; }();
  return exact;
}

DevicePool::~DevicePool() { trim(); }

std::shared_ptr<void> DevicePool::allocate(size_t bytes) {
  if (exact_mode()) {
    void* p = nullptr;
    TESSERA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  }
  const size_t size = bucket(bytes);
  void* p = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    }
  }
  if (!p) {
    cudaError_t err = cudaMalloc(&p, size);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      trim();  // retry once after returning cached blocks
      TESSERA_CUDA_CHECK(cudaMalloc(&p, size));
    }
  }
  in_use_ += size;
  return std::shared_ptr<void>(p, [this, size](void* q) { release(q, size); });
}

std::shared_ptr<void> DevicePool::allocate_resident(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    trim();  // retry once after returning cached blocks
    TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  {
    std::lock_guard lock(mu_);
    resident_ += bytes;
  }
  return std::shared_ptr<void>(p, [this, bytes](void* q) {
    cudaFree(q);
    std::lock_guard lock(mu_);
    resident_ -= bytes;
  });
}

void DevicePool::release(void* p, size_t bytes) {
  std::lock_guard lock(mu_);
  free_[bytes].push_back(p);
  in_use_ -= bytes;
  cached_ += bytes;
}

void DevicePool::trim() {
  std::lock_guard lock(mu_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
  free_.clear();
  cached_ = 0;
}

}  // namespace tessera::ops::cuda
