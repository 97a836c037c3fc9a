// Kernels of the MLA prefill path (mla_prefill.cu), behind plain launchers: the host side
// (mla_prefill.cpp) plans the work and calls these. No C++20 here, so nvcc (C++17) can include it.
//
// The path, per pass over a slice of the context (spec §4.3, "compute friendly" prefill):
//   1. launch_mla_gather_latents: paged cache -> contiguous bf16 latents [rows, latent + rope];
//   2. a cuBLASLt GEMM (host side) decompresses per-head K_nope | V = c_kv · kv_bᵀ, bf16;
//   3. launch_mla_prefill_attend: causal flash attention on tensor cores with K = [K_nope | k_pe].
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

// One sequence's slice [c0, c1) of its context, as held by one pass's buffers.
struct PrefillChunk {
  int32_t q_row;         // row of the sequence's first new token in q / out
  int32_t n_q;           // new tokens (query i sits at absolute position start_pos + i)
  int32_t start_pos;     // tokens cached before this step
  int32_t c0, c1;        // context positions of this slice
  int32_t buf_row;       // row of position c0 in the pass's latent and K/V buffers
  int32_t table_offset;  // the sequence's block table in the flat table array
  int32_t flags;         // kChunkFirst / kChunkLast
};
// kChunkFirst: no earlier slice, start from an empty softmax state. kChunkLast: normalise and write
// the output. A slice that is not last leaves the unnormalised output in `out` and (max, sum) in
// the state buffer for the next one.
constexpr int32_t kChunkFirst = 1, kChunkLast = 2;

// A block of the attention kernel: 64 query rows (from q0) of one chunk, for every head.
struct PrefillTile {
  int32_t chunk;
  int32_t q0;
};

// Copies positions [c0, c1) of every chunk from the paged cache [pages, page, entry] into
// lat[buf_row + (pos - c0), :] (bf16, entry wide). The one place that knows the cache format.
// max_rows: the longest chunk (grid size). entry must be a multiple of 8 (16-byte copies).
void launch_mla_gather_latents(const __nv_bfloat16* cache, int64_t page, int64_t entry, const int32_t* tables,
                               const PrefillChunk* chunks, int64_t num_chunks, int64_t max_rows, __nv_bfloat16* lat,
                               cudaStream_t s);
// The same from an fp8 e4m3 cache: lat = bf16(q), exact and WITHOUT the cache scale (every e4m3
// value is a bf16 value; q · scale would not be). The caller applies the scale where it is exact
// to fp32: the K/V GEMM's alpha and the query's rope part (PrefillAttendArgs::q_rope_scale).
void launch_mla_gather_latents_fp8(const uint8_t* cache, int64_t page, int64_t entry, const int32_t* tables,
                                   const PrefillChunk* chunks, int64_t num_chunks, int64_t max_rows, __nv_bfloat16* lat,
                                   cudaStream_t s);

// The attention kernel handles qk = nope + rope <= 192 and v <= 128 (padded up to the nearest
// compiled tile shape) with nope, rope, v and latent multiples of 8.
bool mla_prefill_attend_supported(int64_t nope, int64_t rope, int64_t v, int64_t latent);
// Dynamic shared memory of the kernel chosen for these dims and query rows a block (0 when
// unsupported).
int64_t mla_prefill_attend_smem_bytes(int64_t nope, int64_t rope, int64_t v, bool split, int64_t rows = 64);
// Query rows an attention block takes: 128 where `wanted` says so and the precision has that
// instance (bf16), else 64. The host tiles each chunk's rows by it (PrefillTile::q0).
int64_t mla_prefill_query_rows(bool split, int64_t wanted);

// Two precisions of the MMA operands:
//  - bf16: q, K, V and P rounded to bf16 (unit roundoff 2^-8), one MMA per product;
//  - split: each operand x carried as hi = bf16(x), lo = bf16(x - hi) and each product taken as
//    hi·hi + hi·lo + lo·hi (three MMAs), ~2^-16 relative: close to fp32 attention, at three times
//    the tensor-core work and twice the K/V bytes.
struct PrefillAttendArgs {
  const float* q;              // [T, heads, nope + rope] fp32 (rope part rotated)
  const __nv_bfloat16* lat;    // [rows, latent + rope]: the pass's latents (k_pe read from here)
  const __nv_bfloat16* kv;     // [rows, heads, nope + v]: decompressed K_nope | V (split: the hi part)
  const __nv_bfloat16* kv_lo;  // split: the lo part, same layout; bf16: unused
  bool split;
  const PrefillChunk* chunks;
  const PrefillTile* tiles;
  float* out;  // [T, heads * v]
  float* ml;   // [T, heads, 2] softmax (max, sum) between slices; unused with one slice
  int heads, nope, rope, v, latent;
  float scale;  // softmax scale
  // Multiplies q's rope part (fp32, before any rounding): the fp8 cache's scale, since the k_pe
  // read from `lat` is unscaled there (see launch_mla_gather_latents_fp8); 1 for a bf16 cache.
  float q_rope_scale = 1.0f;
  int query_rows = 64;  // mla_prefill_query_rows: the tiles' height
};
inline void add_fields(Signature& s, const PrefillAttendArgs& a) {
  static_assert(sizeof(PrefillAttendArgs) == 104, "a field was added: add it to the signature");
  for (const void* p :
       {static_cast<const void*>(a.q), static_cast<const void*>(a.lat), static_cast<const void*>(a.kv),
        static_cast<const void*>(a.kv_lo), static_cast<const void*>(a.chunks), static_cast<const void*>(a.tiles),
        static_cast<const void*>(a.out), static_cast<const void*>(a.ml)})
    s.add(p);
  for (int v : {int{a.split}, a.heads, a.nope, a.rope, a.v, a.latent, a.query_rows}) s.add(v);
  s.add(a.scale);
  s.add(a.q_rope_scale);
}
void launch_mla_prefill_attend(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s);

// The same attention on Hopper's warpgroup MMA (sm90_prefill_wgmma.cu): DeepSeek-V3's head dims
// only (mla_prefill_wgmma_shape), bf16 precision, tiles of 128 query rows, sm_90a code on an SM90
// GPU (the caller checks; elsewhere the kernel traps). Throws core::Error for arguments it does not
// take.
bool mla_prefill_wgmma_shape(int64_t nope, int64_t rope, int64_t v);
int64_t mla_prefill_wgmma_smem_bytes();
void launch_mla_prefill_attend_wgmma(const PrefillAttendArgs& a, int64_t num_tiles, cudaStream_t s);

// hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]) (the split operands).
void launch_split_bf16(const float* x, int64_t n, __nv_bfloat16* hi, __nv_bfloat16* lo, cudaStream_t s);

// out[rows[i], :] = y[i, :] (puts the compacted decode rows back).
void launch_scatter_rows(const float* y, int64_t width, const int64_t* rows, int64_t n, float* out, cudaStream_t s);

}  // namespace tessera::ops::cuda
