// MLA prefill on the GPU over decompressed K/V (spec §4.3), for the CUDA backend's mla_attention.
//
// Sequences of a step with more than one new token (prefill chunks, with or without a cached
// prefix) run here: their whole context's latents are gathered from the paged cache, decompressed
// per head through kv_b (cuBLASLt), and attended causally with tensor cores at head dims
// qk = nope + rope, v (mla_prefill.cu). The step's decode tokens are compacted and handed back to
// the caller's absorbed path, then put back in place.
//
// Precision (TESSERA_MLA_PREFILL_PRECISION): "split" carries q, K, V and P as bf16 hi + lo
// pairs, three MMAs a product, ~2^-16 relative (within ~1e-5 of fp32 attention); "bf16" rounds
// them to bf16 as bf16 transformers does (~3e-3 relative), about three times less tensor-core
// work. Split is kept for short contexts because the fixture models are chaotic: emulating the bf16 variant's
// rounding on the CPU reference breaks the golden bf16-floor criterion on some prompts (a flip, not
// drift), while ~16-bit operands leave every prompt where it was. "auto" (the default) is split where it is
// cheap and bf16 where attention is most of the work: split for steps whose longest prefill context is at
// most kMlaPrefillSplitMaxContext positions (the fixtures' prompts, the first chunk of any prompt),
// bf16 beyond (an 8192-token prompt spends about 40% of its prefill in split attention on the H200,
// docs/PERFORMANCE.md; auto made it 19% faster at 8192 tokens and 50% at 16384 on an H100).
//
// Memory: a pass holds at most `pass_rows` context positions (latents and K/V, bf16); longer
// contexts, or several sequences that do not fit together, take several passes, and the softmax
// state carries from one to the next (output rows in `out`, (max, sum) in a [T, heads, 2] buffer).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <span>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

// What the path borrows from the backend.
struct MlaPrefillEnv {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  // Device scratch; kept alive by the returned tensor until the call returns (the stream orders
  // reuse after that).
  std::function<core::Tensor(core::DType, core::Shape)> alloc;
  // A device tensor holding a copy of host bytes, queued on the stream (the backend stages them in
  // pinned memory, so the host buffer may be freed at once and the copy is truly asynchronous).
  std::function<core::Tensor(core::DType, core::Shape, const void*)> upload;
  // Whether the GPU runs this build's sm_90a kernels (an SM90 GPU, and the build has sm_90a code).
  bool sm90a = false;
};

// Runs the step's decode sequences (one new token each) through the absorbed path: q [Td, ...],
// out [Td, ...], seqs re-based on the compacted rows.
using MlaDecodeFn = std::function<void(const core::Tensor& q, std::span<const AttentionSeq> seqs, core::Tensor& out)>;

// The longest prefill context (cached prefix + the step's tokens) that "auto" runs in split precision.
constexpr int64_t kMlaPrefillSplitMaxContext = 2048;
// Whether a step whose longest prefill context is `context` positions runs in split precision:
// TESSERA_MLA_PREFILL_PRECISION split always, bf16 never, auto (default) up to
// kMlaPrefillSplitMaxContext; throws on any other value, naming the variable.
bool mla_prefill_split_precision(int64_t context);

// Context positions a pass holds at most: TESSERA_MLA_PREFILL_PASS_ROWS when set (tests force
// several passes with it), else as many as fit 256 MiB of K/V (128 heads x (128 + 128): 4096 in
// bf16, 1024 in split precision, which keeps fp32 K/V and its hi and lo parts).
int64_t mla_prefill_pass_rows(const MlaDims& d, bool split);

// Query rows an attention block asks for: TESSERA_MLA_PREFILL_QUERY_ROWS, 128 (default; bf16
// precision only, mla_prefill_query_rows: K and V read once for twice the rows, 14% faster at 8k
// context on an H100) or 64; throws on any other value, naming the variable.
int64_t mla_prefill_query_rows_setting();

// Whether a step's attention runs on the Hopper warpgroup kernel (sm90_prefill_wgmma.cu):
// TESSERA_MLA_PREFILL_WGMMA (`wanted`; default 1: 1.4-1.6x the mma.sync kernel on an H100), bf16
// precision, DeepSeek-V3's head dims and sm_90a; else the mma.sync kernel.
bool mla_prefill_uses_wgmma(bool wanted, bool split, const MlaDims& d, bool sm90a);

// mla_attention for a step with a prefill chunk, where the plan (kernel_registry.h: plan_mla) chose
// the decompressed path. q [T, heads * (nope + rope)] fp32, cache
// pages bf16 or fp8 e4m3 (U8, read as q · cache.scale) [pages, page, latent + rope] (already
// holding the new tokens), kv_b bf16 [heads *
// (nope + v), latent] on the device, out [T, heads * v]. Throws core::Error naming the argument
// at fault.
void run_mla_prefill_step(const MlaPrefillEnv& env, const core::Tensor& q, const KvLayerView& cache,
                          const LinearWeight& kv_b, const MlaDims& d, std::span<const AttentionSeq> seqs,
                          core::Tensor& out, const MlaDecodeFn& decode);

}  // namespace tessera::ops::cuda
