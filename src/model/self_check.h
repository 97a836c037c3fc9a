// The start-up self-check: after loading, a fixed prompt runs through the first layers of the
// loaded model on its backend, every op checked against the CPU reference backend on the same
// weights (ops/checking_ops.h). A kernel that is wrong on a GPU no test ran on (a new architecture)
// is refused at start-up, with the op and the kernel named and the --kernels choice that avoids
// it, instead of serving incoherent output.
//
// Two steps run: a prefill of `prompt_tokens` tokens (GEMM paths, prefill attention), then a decode
// of one token (matrix-vector paths, decode attention), both through the checked layers only: by
// default layer 0 and the first MoE layer, which between them run every op of the model (the dense
// MLP and the MoE block). Layers in between run on the backend unchecked; the layers after them
// and lm_head do not run. The CPU side is then two layers of 17 tokens, whatever the model's depth
// (docs/PERFORMANCE.md has its times).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/checking_ops.h"

namespace tessera::model {

struct SelfCheckOptions {
  int64_t prompt_tokens = 16;   // the prefill step (> 8: the GEMM paths, not the matrix-vector ones)
  std::vector<int64_t> layers;  // the layers checked; empty: layer 0 and the first MoE layer
};

struct SelfCheckReport {
  std::vector<int64_t> layers;  // checked
  int64_t prompt_tokens = 0;
  std::vector<ops::OpCheck> checks;  // every output compared, in call order
  int64_t op_calls = 0;              // op calls checked (an op may have several outputs)
  double seconds = 0;
  // The first output that disagreed, the plan's kernel for it and the --kernels entries that avoid it.
  std::optional<ops::OpCheck> failure;
  std::string kernel;
  std::vector<std::string> alternatives;

  bool ok() const { return !failure.has_value(); }
  // "self-check: 38 op calls on layers 0 and 1 (prefill of 16 tokens, decode of 1) agree with the
  // CPU reference (largest relative error 2.1e-3 of tolerance 3e-2, linear ...), 0.4 s"
  std::string summary() const;
  // "self-check failed: op mla_attention (kernel ...) on layer 0 (decode of 1 token) differs from the
  // CPU reference: ...; run with --kernels mla=kv-major to avoid this kernel, or --skip-self-check to
  // start anyway"
  std::string error() const;
};

// Runs the check on `m` (a DeepseekV3Model loaded from its checkpoint, whose mapped tensors are the
// reference's weights). Throws core::Error when it cannot run at all (no checkpoint, a layer out of
// range); a disagreement is reported, not thrown.
SelfCheckReport self_check(LoadedModel& m, const SelfCheckOptions& options = {});

// The op of `tessera plan`'s kernel lines (ops::KernelChoice::op) whose kernel produced a checked
// output: "linear", "mla decode", "moe router", ...; "" for an op the plan has no line for (the
// elementwise kernels).
std::string plan_row_of(const ops::OpCheck& check);

}  // namespace tessera::model
