#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

StepTape*& active_tape() {
  thread_local StepTape* tape = nullptr;
  return tape;
}

bool ab_switch_on(const char* name) { return core::env_switch_on(name); }

int expert_prefetch_blocks() {
  static const int blocks = core::env_int("TESSERA_EXPERT_PREFETCH", 0, 64);
  return blocks;
}

int moe_grouped_tiles(int64_t pairs, int64_t experts) {
  static const int forced = [] {
    const int n = core::env_int("TESSERA_MOE_GROUPED_TILES", 0, 4);
    TESSERA_CHECK(n != 3, "TESSERA_MOE_GROUPED_TILES=3: expected 0 (by the step), 1, 2 or 4");
    return n;
  }();
  if (forced != 0) return forced;
  // Measured on an H100 (issue 19's checkpoint, 64 experts): at batch 128, 16 pairs an expert on
  // average, 2 tiles gave 7,950 against 7,370 tok/s (an expert of 17-32 pairs streams its weights
  // once instead of twice), 4 tiles no more (their 128 registers a thread). Fewer pairs leave the
  // second tile idle and cost only its registers: one tile there, as before.
  return pairs > 8 * experts ? 2 : 1;
}

bool moe_grouped_weights_a() {
  static const bool on = core::env_flag("TESSERA_MOE_GROUPED_WA");
  return on;
}

bool moe_grouped_wa_three_blocks() {
  static const bool on = core::env_flag("TESSERA_MOE_GROUPED_WA_THREE_BLOCKS");
  return on;
}

bool moe_grouped_wa_pair_groups() {
  static const bool on = core::env_flag("TESSERA_MOE_GROUPED_WA_PAIR_GROUPS");
  return on;
}

MlaDecodeLaunch mla_decode_launch(int sm, bool one_token_a_sequence) {
  static const bool early = core::env_flag("TESSERA_MLA_EARLY_KV");
  static const bool wgmma_early = core::env_flag("TESSERA_MLA_WGMMA_EARLY");
  static const bool clusters = core::env_flag("TESSERA_MLA_DECODE_CLUSTERS");
  static const bool wgmma_pairs = core::env_flag("TESSERA_MLA_WGMMA_PAIRS");
  MlaDecodeLaunch how;
  how.wgmma_pairs = wgmma_pairs && sm >= 90;
  how.early = early && one_token_a_sequence;
  how.wgmma_early = wgmma_early && one_token_a_sequence;
  how.cluster = clusters && sm >= 90 ? 8 : 1;  // 8: the portable cluster size
  return how;
}

bool expert_ring_enabled() {
  static const bool on = core::env_flag("TESSERA_EXPERT_RING");
  return on;
}

bool linear_ring_enabled() {
  static const bool on = ab_switch_on("TESSERA_LINEAR_RING");
  return on;
}

bool expert_early_down() {
  static const bool on = core::env_flag("TESSERA_EXPERT_EARLY_DOWN");
  return on;
}

bool stream_priorities() {
  static const bool on = core::env_flag("TESSERA_STREAM_PRIORITIES");
  return on;
}

bool expert_weights_a() {
  static const bool on = ab_switch_on("TESSERA_EXPERT_WEIGHTS_A");
  return on;
}

// Declared in launch.cuh (a CUDA header: its launch template needs nvcc).
bool pdl_enabled() {
  static const bool enabled = [] {
    if (!ab_switch_on("TESSERA_PDL")) return false;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device): bytes raised to
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mu);
  int& now = allowed[{kernel, device}];
  if (bytes <= now) return;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  now = bytes;
}

}  // namespace tessera::ops::cuda
