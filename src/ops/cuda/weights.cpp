#include "ops/cuda/weights.h"

#include <cuda_bf16.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

using core::DType;
using core::Tensor;
using Format = LinearWeight::Format;

namespace {

// Tensors already on the device in the backend's format (synthetic models) are kept as they are.
bool on_device(const Tensor& t, DType dtype) { return t.device() == core::Device::kCuda && t.dtype() == dtype; }

Tensor upload_same(CudaContext& ctx, const Tensor& t) {
  if (t.device() == core::Device::kCuda) return t;
  return ctx.upload_bytes(t.dtype(), t.shape(), t.raw());
}

Tensor upload_temporary(CudaContext& ctx, const Tensor& t) {
  if (t.device() == core::Device::kCuda) return t;
  Tensor d = ctx.alloc(t.dtype(), t.shape());
  TESSERA_CUDA_CHECK(cudaMemcpy(d.raw(), t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
  return d;
}

LinearWeight bf16_linear(const LinearWeight& w, Tensor weight) {
  LinearWeight b;
  b.name = w.name;
  b.out = w.out;
  b.in = w.in;
  b.weight = std::move(weight);
  return b;
}

// Exact values on the host, rounded to bf16, uploaded: dense weights of another dtype than bf16
// (rare) and quantized ones of widths the device dequantizer does not take.
Tensor host_bf16(CudaContext& ctx, const LinearWeight& w) {
  std::vector<float> row(static_cast<size_t>(w.in));
  std::vector<__nv_bfloat16> host(static_cast<size_t>(w.out * w.in));
  for (int64_t r = 0; r < w.out; ++r) {
    w.dequant_row(r, row.data());
    for (int64_t i = 0; i < w.in; ++i) host[static_cast<size_t>(r * w.in + i)] = __float2bfloat16_rn(row[i]);
  }
  return ctx.upload_bytes(DType::kBF16, {w.out, w.in}, host.data());
}

// A quantized weight's codes on the device as the kernels read them: FP8 as the checkpoint stores
// them; NVFP4 in the device layout (kernels/quant/mma_pairs.h), each 4-byte word's bits mapped on
// the device where the copy lies. `resident`: the weights' own memory, else a temporary from the
// activation pool. A tensor already on the device (synthetic models' random codes) is taken over
// as upload_same takes it, and mapped in place for the weights' own memory (a copy would hold
// the weights twice until the caller's went), into the temporary otherwise.
Tensor device_codes(CudaContext& ctx, const LinearWeight& w, bool resident) {
  const Tensor& t = w.weight;
  if (w.format != Format::kNvfp4) return resident ? upload_same(ctx, t) : upload_temporary(ctx, t);
  TESSERA_CHECK(t.nbytes() % 4 == 0, "{}: NVFP4 codes of {} bytes (the device layout maps 4-byte words)", w.name,
                t.nbytes());
  const bool taken_over = resident && t.device() == core::Device::kCuda;
  Tensor d = taken_over ? t : resident ? ctx.alloc_resident(t.dtype(), t.shape()) : ctx.alloc(t.dtype(), t.shape());
  const void* src = t.raw();
  if (t.device() != core::Device::kCuda) {
    TESSERA_CUDA_CHECK(cudaMemcpy(d.raw(), t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
    src = d.raw();
  }
  launch_nvfp4_device_layout(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(d.raw()),
                             static_cast<int64_t>(t.nbytes()), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
  return d;
}

}  // namespace

std::shared_ptr<void> pinned_host_buffer(size_t bytes) {
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

bool keeps_quantized(Format format, LinearUse use, int64_t in) {
  // Input widths the quantized kernels take (16-byte loads of a row; every real checkpoint's).
  return format != Format::kDense && use == LinearUse::kProjection && in % 32 == 0;
}

QuantMatrix quant_matrix(const LinearWeight& w) {
  TESSERA_CHECK(w.format != Format::kDense && w.weight.device() == core::Device::kCuda,
                "{}: not a quantized device weight", w.name);
  QuantMatrix m;
  m.data = static_cast<const uint8_t*>(w.weight.raw());
  m.scale = w.scale.raw();
  m.n = static_cast<int32_t>(w.out);
  m.k = static_cast<int32_t>(w.in);
  m.scale_cols = static_cast<int32_t>(w.scale.dim(1));
  if (w.format == Format::kNvfp4) {
    TESSERA_CHECK(w.group_size == 16 && w.in % 16 == 0, "{}: NVFP4 with group size {} (the kernels take 16)", w.name,
                  w.group_size);
    m.format = QuantFormat::kNvfp4;
    m.global_scale = w.global_scale;
  } else {
    m.format = QuantFormat::kFp8Block;
    m.block_rows = static_cast<int32_t>(w.block_rows);
    m.block_cols = static_cast<int32_t>(w.block_cols);
  }
  return m;
}

Tensor dequantized_bf16(CudaContext& ctx, const LinearWeight& w, bool resident) {
  TESSERA_CHECK(w.in % 8 == 0, "{}: dequantizing needs an input width that is a multiple of 8 (got {})", w.name, w.in);
  Tensor out = resident ? ctx.alloc_resident(DType::kBF16, {w.out, w.in}) : ctx.alloc(DType::kBF16, {w.out, w.in});
  launch_dequant_bf16(quant_matrix(w), ptr<__nv_bfloat16>(out), ctx.stream());
  TESSERA_CUDA_CHECK_LAUNCH();
  return out;
}

LinearWeight upload_linear(CudaContext& ctx, const LinearWeight& w, LinearUse use) {
  if (w.format == Format::kDense && on_device(w.weight, DType::kBF16)) return w;
  if (w.format == Format::kDense && w.weight.dtype() == DType::kBF16)
    return bf16_linear(w, ctx.upload_bytes(DType::kBF16, {w.out, w.in}, w.weight.raw()));
  if (w.format == Format::kDense || w.in % 8 != 0) return bf16_linear(w, host_bf16(ctx, w));
  // The checkpoint's bytes (NVFP4's words with their bits mapped); converted on the device when
  // this use reads bf16 (then they are a temporary from the activation pool, not resident memory
  // that would leave a hole).
  LinearWeight d = w;
  if (keeps_quantized(w.format, use, w.in)) {
    d.weight = device_codes(ctx, w, /*resident=*/true);
    d.scale = upload_same(ctx, w.scale);
    return d;
  }
  d.weight = device_codes(ctx, w, /*resident=*/false);
  d.scale = upload_temporary(ctx, w.scale);
  LinearWeight b = bf16_linear(w, dequantized_bf16(ctx, d, /*resident=*/true));
  ctx.sync();  // before the quantized bytes go
  return b;
}

Tensor upload_vector(CudaContext& ctx, const Tensor& t) {
  if (on_device(t, DType::kF32)) return t;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  return ctx.upload_bytes(DType::kF32, t.shape(), v.data());
}

Tensor upload_table(CudaContext& ctx, const Tensor& t) {
  if (on_device(t, DType::kBF16)) return t;
  if (t.dtype() == DType::kBF16) return ctx.upload_bytes(DType::kBF16, t.shape(), t.raw());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  std::vector<__nv_bfloat16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16_rn(v[i]);
  return ctx.upload_bytes(DType::kBF16, t.shape(), b.data());
}

}  // namespace tessera::ops::cuda
