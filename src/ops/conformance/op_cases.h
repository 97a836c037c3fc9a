// The backend conformance table: one list of cases over every virtual of ops::Ops (ops.h) and the
// shape families the engine meets (tiny, a ragged paged step, the real per-layer shapes of
// Kimi-K2.5 and DeepSeek-V3). A case makes its inputs from a fixed seed, so that every backend it
// is set up on gets the same values; the CPU backend's outputs are the expected ones, and another
// backend's must be within the case's relative-RMS tolerance of them.
//
// tests/ops/backend_ops_test.cpp runs the table for correctness; `tessera bench kernels --cases`
// times the same cases (perf.h: BoundCase::run is the op alone, with its inputs already on the
// backend). No gtest, no CUDA headers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tessera::ops::conformance {

// The backend a case is set up on. Ops::to_host_f32 reads fp32 tensors only, so KV pages (bf16 or
// fp8 bytes on a GPU) are read through `raw_bytes`: the tensor's bytes on the host, whatever its
// dtype and device.
struct Target {
  ops::Ops* ops = nullptr;
  std::function<std::vector<uint8_t>(const core::Tensor&)> raw_bytes;
};
// A target for a backend whose tensors live in host memory (the CPU backend).
Target host_target(ops::Ops& ops);

// One output of a case, on the host. Integer outputs (token ids, expert ids) are stored as floats
// (exact below 2^24) and compared with tolerance 0.
struct CaseOutput {
  std::string name;
  std::vector<float> values;
  double max_rel_rms = -1;  // >= 0: this output's own tolerance, else the case's
};

// A case set up on one backend: inputs uploaded, outputs allocated.
struct BoundCase {
  std::function<void()> run;                      // the op under test, nothing else (what perf mode times)
  std::function<std::vector<CaseOutput>()> read;  // its outputs, after run
  // For perf mode (perf.h), where the case declares them: the fewest bytes the op must move through
  // device memory (weights as stored, inputs read once, outputs written once) and its FLOPs; 0 = not
  // declared.
  double bytes = 0, flops = 0;
};

// Which kernel choice of the plan (ops/cuda/kernel_registry.h) a case's op goes through, so that a
// backend with several kernels runs the case once per kernel.
enum class KernelFamily { kNone, kMla, kMoe };
// The shapes the plan chooses by (kernel_registry.h's MlaShape / MoeShape, without CUDA headers).
struct MlaPlanShape {
  int64_t heads = 0, latent = 0, rope = 0, nope = 0, v = 0;
  bool fp8_cache = false;
};
struct MoePlanShape {
  int64_t experts = 0, hidden = 0, inter = 0;
};

struct OpCase {
  std::string op;          // the Ops virtual under test (one of ops_virtuals())
  std::string family;      // one of shape_families()
  std::string shape_name;  // the case's shapes in words
  // Tolerance against the fp32 CPU reference, for a backend with bf16 weights and bf16 tensor-core
  // paths (the CUDA backend); rel-RMS = rms(got - want) / rms(want), 0 = bit-exact.
  double max_rel_rms = 0;
  std::map<std::string, double> kernel_max_rel_rms;  // tighter tolerance of a kernel (e.g. fp32 "cuda-core")
  KernelFamily kernels = KernelFamily::kNone;
  MlaPlanShape mla;   // kernels == kMla
  MoePlanShape moe;   // kernels == kMoe
  uint64_t seed = 0;  // of its inputs (from its id, so reordering the table changes nothing)
  std::function<BoundCase(const Target&)> setup;

  std::string id() const { return op + "/" + family + "/" + shape_name; }
  double tolerance(const std::string& kernel) const {
    auto it = kernel_max_rel_rms.find(kernel);
    return it == kernel_max_rel_rms.end() ? max_rel_rms : it->second;
  }
};

// Every virtual member function of ops::Ops, by name; a test checks this list against ops.h.
const std::vector<std::string>& ops_virtuals();
// "tiny", "ragged", "kimi-k2.5", "deepseek-v3".
const std::vector<std::string>& shape_families();
// The cases of `families` (all when empty), in table order. Building the list is cheap: inputs are
// made by OpCase::setup.
std::vector<OpCase> op_cases(const std::vector<std::string>& families = {});

// rms(got - want) / rms(want) over the finite values of `want` (0 when both are all zero, infinity
// when only `want` is); non-finite values of `want` must be matched exactly and count in `mismatched`.
struct Comparison {
  double rel_rms = 0;
  int64_t mismatched = 0;  // non-finite mismatches, or a size mismatch (then all)
};
Comparison compare(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace tessera::ops::conformance
