// Writing one token's latent into the paged cache: where its slot is, and how a value is stored in a
// bf16 or an fp8 e4m3 cache (ops::KvLayerView). Shared by the cache-write and mla_prepare kernels.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/kernels/attention/kv_fp8.cuh"
#include "ops/cuda/kernels/kernels.h"

namespace tessera::ops::cuda {

// Element offset of token t's entry: its position's page from the sequence's block table.
// -1 for a token at position -1: one this cache does not hold (another rank's part of a sharded
// cache), which is not written.
__device__ inline int64_t kv_slot_offset(const TokenInfo* info, const int32_t* tables, int64_t t, int64_t page,
                                         int64_t entry) {
  const TokenInfo ti = info[t];
  if (ti.pos < 0) return -1;
  const int64_t page_id = tables[ti.table_offset + ti.pos / page];
  return (page_id * page + ti.pos % page) * entry;
}

__device__ inline void store_kv(__nv_bfloat16* dst, float v, float /*scale*/) { *dst = __float2bfloat16_rn(v); }
// sat_e4m3_rne(v / scale).
__device__ inline void store_kv(uint8_t* dst, float v, float scale) { *dst = kvfp8::encode(v, scale); }

}  // namespace tessera::ops::cuda
