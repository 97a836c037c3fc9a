// The CUDA backends a conformance case (ops/conformance/op_cases.h) runs on: one per kernel of the
// case's op family that the kernel registry can run for its shapes on this device (forced with
// --kernels syntax), and the registry's own choice. Shared by the backend tests (correctness) and
// `tessera bench kernels --cases` (perf mode), so both run exactly the same variants.
#pragma once

#include <string>
#include <vector>

#include "ops/conformance/op_cases.h"
#include "ops/cuda/kernel_registry.h"

namespace tessera::ops::cuda {

struct CaseVariant {
  std::string spec;   // for make_cuda_ops: "mla=wgmma", "moe=auto", "" (the default)
  std::string label;  // in reports: the kernel's flag name, or "auto (<its choice>)", or "default"
};

// The variants of `c` on `caps`; each kernel the registry refuses for the case's shapes is appended
// to `skipped` as "kernel: why".
std::vector<CaseVariant> case_variants(const conformance::OpCase& c, const DeviceCaps& caps,
                                       std::vector<std::string>& skipped);

// A conformance target for a CUDA backend (KV pages read back through device_bytes).
conformance::Target cuda_target(Ops& ops);

}  // namespace tessera::ops::cuda
