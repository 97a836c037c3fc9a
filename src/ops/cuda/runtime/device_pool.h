// A caching device allocator: cudaFree synchronises the device, so freed blocks go back to a
// free list keyed by their (power-of-two rounded) size and are reused by later allocations.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tessera::ops::cuda {

class DevicePool {
 public:
  ~DevicePool();
  // Returns a shared owner of at least `bytes` of device memory; releasing the last reference
  // returns the block to the pool.
  std::shared_ptr<void> allocate(size_t bytes);
  // Memory held for the backend's life (weights, KV pages): exactly `bytes`, not rounded to a
  // power of two (a 2.3 GB embedding table would take 4 GB, and each layer's KV pages up to twice
  // their size: the memory plan counts exact bytes), and given back to the driver when released.
  std::shared_ptr<void> allocate_resident(size_t bytes);
  size_t bytes_in_use() const { return in_use_ + resident_; }
  // TESSERA_DEVICE_POOL=exact: an exact-size allocation per tensor (debugging with compute-sanitizer).
  static bool exact_mode();
  size_t bytes_cached() const { return cached_; }
  // Gives cached blocks back to the driver.
  void trim();

 private:
  void release(void* p, size_t bytes);
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, cached_ = 0, resident_ = 0;
};

}  // namespace tessera::ops::cuda
