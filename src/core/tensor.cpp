#include "core/tensor.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::core {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

Tensor Tensor::zeros(DType dtype, Shape shape) {
  for (int64_t d : shape) TESSERA_CHECK(d >= 0, "Tensor::zeros: negative dimension in {}", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  auto* mem = new uint8_t[bytes > 0 ? bytes : 1]();
  t.storage_ = std::shared_ptr<void>(mem, [](void* p) { delete[] static_cast<uint8_t*>(p); });
  t.data_ = mem;
  return t;
}

Tensor Tensor::adopt(DType dtype, Shape shape, void* data, Device device, std::shared_ptr<void> owner) {
  Tensor t = view(dtype, std::move(shape), data, device);
  t.storage_ = std::move(owner);
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  TESSERA_CHECK(shape_numel(shape) == numel(), "reshape {} -> {}: element count differs", shape_str(shape_),
                shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TESSERA_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
                "slice_rows [{}, {}) out of range for shape {}", begin, end, shape_str(shape_));
  Tensor t = *this;
  size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<size_t>(shape_[0]);
  t.shape_[0] = end - begin;
  t.data_ = static_cast<uint8_t*>(data_) + row_bytes * static_cast<size_t>(begin);
  return t;
}

}  // namespace tessera::core
