// Page-locked host memory for the small per-step uploads (token ids, rotary tables, block tables).
// A cudaMemcpy from pageable memory makes the host wait for the device, which drains the queue of
// kernels at every layer; copies from pinned memory are truly asynchronous. Staged bytes must stay
// untouched until their copy has run, so they are only recycled after the stream is synchronised.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera::ops::cuda {

class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging();

  // Copies `bytes` from `src` into pinned memory and returns that copy; valid until recycle().
  void* stage(const void* src, size_t bytes);
  // Call only when every copy issued from staged memory has completed (after a stream sync).
  // Keeps one block as large as everything staged since the last call.
  void recycle();

 private:
  struct Block {
    char* data = nullptr;
    size_t size = 0, used = 0;
  };
  std::vector<Block> blocks_;
};

}  // namespace tessera::ops::cuda
