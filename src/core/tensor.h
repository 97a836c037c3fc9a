// A dense, row-major tensor: dtype, shape, device and a data pointer. A tensor either owns its
// storage (shared, so copies are cheap) or is a view into memory owned elsewhere (an mmap'd
// checkpoint, a KV page pool). Views do not own.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera::core {

enum class Device : uint8_t { kCpu, kCuda };

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // Allocates zero-initialised CPU storage.
  static Tensor zeros(DType dtype, Shape shape);
  // A non-owning view of `data`.
  static Tensor view(DType dtype, Shape shape, void* data, Device device = Device::kCpu);
  // A tensor over `data` kept alive by `owner` (e.g. device memory with its own deleter).
  static Tensor adopt(DType dtype, Shape shape, void* data, Device device, std::shared_ptr<void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool owns_storage() const { return storage_ != nullptr; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the leading dimension, as a view sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;
};

}  // namespace tessera::core
