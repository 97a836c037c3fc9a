#include "ops/cuda/weights.h"

#include <cuda_bf16.h>

#include <vector>

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;

namespace {

// Tensors already on the device in the backend's format (synthetic models) are kept as they are.
bool on_device(const Tensor& t, DType dtype) { return t.device() == core::Device::kCuda && t.dtype() == dtype; }

}  // namespace

LinearWeight upload_linear(CudaContext& ctx, const LinearWeight& w) {
  if (w.format == LinearWeight::Format::kDense && on_device(w.weight, DType::kBF16)) return w;
  // Dequantize row by row on the host (exact), round to bf16, upload.
  std::vector<float> row(static_cast<size_t>(w.in));
  std::vector<__nv_bfloat16> host(static_cast<size_t>(w.out * w.in));
  for (int64_t r = 0; r < w.out; ++r) {
    w.dequant_row(r, row.data());
    for (int64_t i = 0; i < w.in; ++i) host[static_cast<size_t>(r * w.in + i)] = __float2bfloat16_rn(row[i]);
  }
  LinearWeight d;
  d.format = LinearWeight::Format::kDense;
  d.name = w.name;
  d.out = w.out;
  d.in = w.in;
  d.weight = ctx.upload_bytes(DType::kBF16, {w.out, w.in}, host.data());
  return d;
}

Tensor upload_vector(CudaContext& ctx, const Tensor& t) {
  if (on_device(t, DType::kF32)) return t;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  return ctx.upload_bytes(DType::kF32, t.shape(), v.data());
}

Tensor upload_table(CudaContext& ctx, const Tensor& t) {
  if (on_device(t, DType::kBF16)) return t;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  std::vector<__nv_bfloat16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16_rn(v[i]);
  return ctx.upload_bytes(DType::kBF16, t.shape(), b.data());
}

}  // namespace tessera::ops::cuda
