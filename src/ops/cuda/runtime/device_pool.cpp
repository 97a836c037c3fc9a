#include "ops/cuda/runtime/device_pool.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string_view>

#include "core/env.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
size_t bucket(size_t bytes) { return std::bit_ceil(std::max<size_t>(bytes, 512)); }

// Resident buffers below this size come from slabs of kSlabBytes; each starts kAlign-aligned (the
// widest vector load any kernel makes, and cuBLASLt's preferred alignment).
constexpr size_t kSlabLimit = size_t{32} << 20;
constexpr size_t kSlabBytes = size_t{256} << 20;
constexpr size_t kAlign = 256;

}  // namespace

// TESSERA_DEVICE_POOL=exact: every tensor is its own cudaMalloc of exactly its size, freed (with a
// device sync) when released, so that compute-sanitizer sees an access past a tensor's end instead
// of the slack of a power-of-two block or a block reused by another tensor. Debugging only: slow.
bool DevicePool::exact_mode() {
  static const bool exact = [] { return core::env_value("TESSERA_DEVICE_POOL") == "exact"; }();
  return exact;
}

CurrentDevice::CurrentDevice(int device) {
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

CurrentDevice::~CurrentDevice() {
  if (changed_) (void)cudaSetDevice(previous_);
}

DevicePool::~DevicePool() { trim(); }

std::shared_ptr<void> DevicePool::allocate(size_t bytes) {
  if (exact_mode()) {
    void* p = nullptr;
    {
      CurrentDevice on(device_);
      TESSERA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    }
    return std::shared_ptr<void>(p, [device = device_](void* q) {
      CurrentDevice on(device);
      cudaFree(q);
    });
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
    CurrentDevice on(device_);
    cudaError_t err = cudaMalloc(&p, size);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      trim();  // retry once after returning cached blocks
      TESSERA_CUDA_CHECK(cudaMalloc(&p, size));
    }
  }
  {
    std::lock_guard lock(mu_);  // ranks allocate from several threads
    in_use_ += size;
  }
  return std::shared_ptr<void>(p, [this, size](void* q) { release(q, size); });
}

void* DevicePool::cuda_malloc(size_t bytes) {
  CurrentDevice on(device_);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    trim();  // retry once after returning cached blocks
    TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  }
  return p;
}

std::shared_ptr<void> DevicePool::allocate_resident(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes < kSlabLimit && !exact_mode()) return from_slab(bytes);
  void* p = cuda_malloc(bytes);
  {
    std::lock_guard lock(mu_);
    resident_ += bytes;
  }
  return std::shared_ptr<void>(p, [this, bytes](void* q) {
    {
      CurrentDevice on(device_);
      cudaFree(q);
    }
    std::lock_guard lock(mu_);
    resident_ -= bytes;
  });
}

std::shared_ptr<void> DevicePool::from_slab(size_t bytes) {
  const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  if (slabs_.empty() || slabs_.back()->used + size > slabs_.back()->size) {
    auto slab = std::make_shared<Slab>();
    slab->size = kSlabBytes;
    CurrentDevice on(device_);
    if (cudaMalloc(&slab->base, slab->size) != cudaSuccess) {
      // Near the end of the device: a slab of just this buffer rather than failing.
      (void)cudaGetLastError();
      slab->size = size;
      TESSERA_CUDA_CHECK(cudaMalloc(&slab->base, slab->size));
    }
    resident_ += slab->size;
    slabs_.push_back(slab);
  }
  std::shared_ptr<Slab> slab = slabs_.back();
  void* p = static_cast<char*>(slab->base) + slab->used;
  slab->used += size;
  ++slab->live;
  return std::shared_ptr<void>(p, [this, slab](void*) {
    std::lock_guard lock(mu_);
    if (--slab->live > 0) return;
    // Every buffer of the slab is gone: the memory goes back (the slab being carved is reused).
    if (slab == slabs_.back()) {
      slab->used = 0;
      return;
    }
    {
      CurrentDevice on(device_);
      cudaFree(slab->base);
    }
    resident_ -= slab->size;
    std::erase(slabs_, slab);
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
  CurrentDevice on(device_);
  // Empty slabs too (the destructor's call frees the last one).
  std::erase_if(slabs_, [this](const std::shared_ptr<Slab>& s) {
    if (s->live > 0) return false;
    cudaFree(s->base);
    resident_ -= s->size;
    return true;
  });
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
  free_.clear();
  cached_ = 0;
}

}  // namespace tessera::ops::cuda
