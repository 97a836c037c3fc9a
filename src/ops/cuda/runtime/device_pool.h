// A caching device allocator, one per device: cudaFree synchronises the device, so freed blocks go
// back to a free list keyed by their (power-of-two rounded) size and are reused by later allocations.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tessera::ops::cuda {

// Makes `device` current for its scope, then restores the thread's previous one: the pool's
// cudaMalloc / cudaFree calls act on its own device whatever the calling thread has current.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool();
  int device() const { return device_; }
  // Returns a shared owner of at least `bytes` of device memory; releasing the last reference
  // returns the block to the pool.
  std::shared_ptr<void> allocate(size_t bytes);
  // Memory held for the backend's life (weights, KV pages): exactly `bytes`, not rounded to a
  // power of two (a 2.3 GB embedding table would take 4 GB, and each layer's KV pages up to twice
  // their size: the memory plan counts exact bytes). Large buffers are their own cudaMalloc, given
  // back when released; small ones (expert weights, scales: thousands of them) are carved from
  // slabs, because cudaMalloc rounds each allocation up to its 2 MiB pages (Kimi-K2.5's 0.9 MB
  // NVFP4 scale tensors would take 2 MiB each: 4 GB more than the plan on 4 layers).
  std::shared_ptr<void> allocate_resident(size_t bytes);
  size_t bytes_in_use() const { return in_use_ + resident_; }
  // TESSERA_DEVICE_POOL=exact: an exact-size allocation per tensor (debugging with compute-sanitizer).
  static bool exact_mode();
  size_t bytes_cached() const { return cached_; }
  // Resident bytes held from the driver (slabs counted whole).
  size_t bytes_resident() const { return resident_; }
  // Gives cached blocks back to the driver.
  void trim();

 private:
  struct Slab {
    void* base = nullptr;
    size_t size = 0, used = 0;
    int64_t live = 0;  // allocations not yet released
  };
  void* cuda_malloc(size_t bytes);  // retries once after trim()
  std::shared_ptr<void> from_slab(size_t bytes);
  void release(void* p, size_t bytes);
  const int device_;
  std::vector<std::shared_ptr<Slab>> slabs_;  // the last one is being carved
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, cached_ = 0, resident_ = 0;
};

}  // namespace tessera::ops::cuda
