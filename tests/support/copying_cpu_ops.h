// The CPU reference backend, but its uploads copy (as a GPU backend's do), so load_model goes
// through the staged loader (model/weight_staging.h) on a machine without a GPU. It notes where
// the bytes it was handed lay, so a test can tell staged memory from the checkpoint's mapping.
#pragma once

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace tessera::test {

class CopyingCpuOps : public ops::cpu::CpuOps {
 public:
  bool uploads_copy_weights() const override { return true; }
  ops::LinearWeight upload_linear(const ops::LinearWeight& w, ops::LinearUse) override {
    ops::LinearWeight c = w;
    c.weight = copy(w.weight);
    c.scale = copy(w.scale);
    return c;
  }
  core::Tensor upload_vector(const core::Tensor& t) override { return copy(t); }
  core::Tensor upload_table(const core::Tensor& t) override { return copy(t); }

  std::vector<std::pair<const void*, size_t>> sources;  // every upload's source bytes, in order

 private:
  core::Tensor copy(const core::Tensor& t) {
    if (!t.defined() || t.nbytes() == 0) return t;
    sources.emplace_back(t.raw(), t.nbytes());
    auto owner = std::shared_ptr<void>(::operator new(t.nbytes()), [](void* p) { ::operator delete(p); });
    std::memcpy(owner.get(), t.raw(), t.nbytes());
    return core::Tensor::adopt(t.dtype(), t.shape(), owner.get(), core::Device::kCpu, owner);
  }
};

}  // namespace tessera::test
