// MoE of the CUDA backend: the router, the routed experts (grouped kernels over expert-sorted pairs
// for decode-sized steps, kernels/moe/; per-expert cuBLASLt GEMMs beyond, with the routing read back
// to the host) and the whole block with the shared expert on the second stream.
#pragma once

#include <cuda_bf16.h>

#include <array>
#include <map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/context.h"
#include "ops/ops.h"

namespace tessera::ops::cuda {

// What the MoE ops keep for the backend's life.
struct MoeState {
  // Allocates the router counter on ctx's device.
  explicit MoeState(CudaContext& ctx);

  // Device arrays of the experts' weight pointers, built once per expert list (a model layer's
  // list lives as long as the model).
  struct ExpertTable {
    core::Tensor storage;
    const __nv_bfloat16* const* gate = nullptr;
    const __nv_bfloat16* const* up = nullptr;
    const __nv_bfloat16* const* down = nullptr;
  };
  // Per (experts, shared) list: the weight pointers the table was built from, and the table.
  std::map<std::pair<const ExpertWeights*, const ExpertWeights*>,
           std::pair<std::vector<const __nv_bfloat16*>, ExpertTable>>
      expert_tables;
  // The same for experts held quantized: QuantMatrix [3 (gate, up, down), experts (+ 1: a folded
  // shared expert)] on the device, built from (and checked against) the host copies.
  struct QuantTable {
    std::vector<QuantMatrix> host;
    core::Tensor storage;
    // On an sm_90 GPU (expert_ring_on): the ring kernels' tensor maps
    // (launch_moe_quant_ring_experts); undefined where they are not used or could not be made.
    core::Tensor ring_maps;
  };
  // Per (experts, folded shared expert or null) list.
  std::map<std::pair<const ExpertWeights*, const ExpertWeights*>, QuantTable> quant_tables;
  // Per expert list of a tensor-parallel rank's share: which experts it holds, and those flags on
  // the device (MoeSlots::held).
  std::map<const ExpertWeights*, std::pair<std::vector<uint8_t>, core::Tensor>> held_masks;
  core::Tensor router_done_blocks;  // launch_router_fused's counter (0 between calls)
};

// Whether quantized routed experts run on the ring kernels (quant/grouped_ring.cu) on this device
// where their shapes allow: an sm_90 GPU with sm_90a code in the build, unless TESSERA_EXPERT_RING=0.
bool expert_ring_on(const DeviceCaps& caps);
// Device bytes of the tables this file makes at a layer's first step, after the KV pool was sized,
// for `linears` routed-expert linears: one entry a linear (a QuantMatrix where they are held
// quantized, else a bf16 weight pointer) and, with the ring kernels (`ring`), the linear's two tensor
// maps (codes and scales).
uint64_t routed_expert_table_bytes(uint64_t linears, bool quantized, bool ring);
// Whether a step of `tokens` tokens runs its experts on the ring kernels when they are on: every
// step but NVFP4's one-token ones, where the register-streaming kernel measured faster on the H200
// (slope 231.8 against 239.9 µs a Kimi-K2.5 layer; again with the device layout: 1.28-1.32 ms
// against 1.19 ms a 3-layer batch-1 step; docs/PERFORMANCE.md).
bool ring_for_step(QuantFormat format, int64_t tokens);
// Whether a shared expert held quantized in the routed experts' format and shape runs as one more
// expert of their quantized kernels (a last slot of weight 1 a token), where it otherwise runs after
// them as its own three projections (DeepSeek-V3 FP8 at batch 1: ~35 µs a layer for 44 MB, against
// ~10 µs of bytes; docs/PERFORMANCE.md). Off by default until measured on a GPU:
// TESSERA_SHARED_EXPERT_FOLD=1 turns it on.
bool shared_expert_fold_on();
// Whether a shared expert of matrices `shared` (gate, up, down) can be expert E of the quantized
// table of `experts` routed experts like `routed`: the same format, shape and quantization blocks
// (the table's kernels take one), and a table of experts + 1 within the kernels' limits.
bool shared_expert_fits_routed_table(const std::array<QuantMatrix, 3>& shared, const std::array<QuantMatrix, 3>& routed,
                                     int64_t experts);

void moe_route(CudaContext& ctx, MoeState& state, const core::Tensor& x, const LinearWeight& gate,
               const core::Tensor& bias, const RouterConfig& cfg, core::Tensor& ids, core::Tensor& weights);
// Ops::moe_experts. `ops` is the backend: a shared expert that does not ride along in the grouped
// kernels runs as its Ops::mlp and is added last.
void moe_experts(CudaContext& ctx, MoeState& state, Ops& ops, const core::Tensor& x,
                 const std::vector<ExpertWeights>& experts, const core::Tensor& ids, const core::Tensor& weights,
                 core::Tensor& out, const ExpertWeights* shared);
// Ops::moe with the shared expert on the second stream, beside the router and the routed experts'
// sorting. False, with nothing launched, where that does not apply (no shared expert, the
// per-expert path, TESSERA_SHARED_EXPERT_STREAM=0): the caller runs Ops::moe's sequence.
bool moe(CudaContext& ctx, MoeState& state, const core::Tensor& x, const LinearWeight& router, const core::Tensor& bias,
         const RouterConfig& cfg, const std::vector<ExpertWeights>& experts, const ExpertWeights* shared,
         core::Tensor& out);

}  // namespace tessera::ops::cuda
