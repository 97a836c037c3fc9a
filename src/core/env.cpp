#include "core/env.h"

#include <array>
#include <charconv>
#include <cstdlib>

#include "core/error.h"

namespace tessera::core {

namespace {

constexpr std::array<EnvSwitch, 37> kSwitches{{
    {"TESSERA_KERNELS", "",
     "forced CUDA kernels, op=kernel[,op=kernel] (as --kernels, which wins): mla=wgmma|kv-major|mma|cuda-core, "
     "moe=grouped|per-expert"},
    {"TESSERA_CUDA_GRAPHS", "1", "0: run decode steps eagerly, kernel by kernel (as --enforce-eager)"},
    {"TESSERA_PDL", "1", "0: no programmatic dependent launch on sm_90+ (A/B measurements)"},
    {"TESSERA_GEMV_LOOP", "1", "0: matrix-vector blocks take one row group each instead of looping (A/B)"},
    {"TESSERA_SHARED_EXPERT_STREAM", "1",
     "0: the shared expert runs inside the routed experts' launch, or after them, instead of on a second stream "
     "(A/B)"},
    {"TESSERA_SHARED_EXPERT_FOLD", "0",
     "1: a shared expert held quantized in the routed experts' format and shape (DeepSeek-V3 FP8) runs as one more "
     "expert of their kernels instead of after them (an experiment, not yet measured: A/B)"},
    {"TESSERA_QUANT_GEMV_PAIR", "1",
     "0: two quantized projections of one token's input (DeepSeek-V3 FP8's q_a and kv_a) run as two matrix-vector "
     "launches instead of one (A/B)"},
    {"TESSERA_EXPERT_PREFETCH", "0",
     "K blocks ahead the quantized MMA kernels (experts, dense NVFP4/FP8) ask L2 for their weights; 0: none "
     "(an experiment, A/B)"},
    {"TESSERA_MOE_GROUPED_TILES", "0",
     "tiles of 16 pairs the bf16 routed experts' tensor-core kernels multiply by each weight fragment they stream "
     "(an expert of up to 16 x N pairs then streams its weights once): 1, 2 or 4; 0: by the step, 2 where it "
     "averages more than 8 pairs an expert, else 1 (A/B)"},
    {"TESSERA_MOE_GROUPED_WA_PAIR_GROUPS", "1",
     "0: the bf16 routed experts' weights-as-A kernels run an expert's passes of 32 pairs one after another in one "
     "block instead of in parallel blocks where the step averages more than 32 pairs an expert (the shared expert "
     "alone at 128 tokens: 4); the same values; for A/B"},
    {"TESSERA_MOE_GROUPED_WA_THREE_BLOCKS", "0",
     "1: the bf16 routed experts' weights-as-A kernels capped at 80 registers for 3 blocks an SM instead of 2 "
     "(some spills; the same values; an experiment: 2.4% faster at 64 experts x 128 tokens on an H100, A/B)"},
    {"TESSERA_MOE_GROUPED_WA", "1",
     "0: the bf16 routed experts' tensor-core kernels put the activations in the MMA's A operand (the earlier "
     "kernels) instead of the weights (16 rows of gate and up, or of down, a warp; up to 32 pairs a pass; "
     "silu(gate) * up in registers where K is not split); for A/B"},
    {"TESSERA_EXPERT_RING", "1",
     "0: quantized (NVFP4, FP8) routed experts on sm_90a stream their weights into registers (quant_expert_mma_kernel) "
     "instead of through the shared-memory ring a producer warp fills by TMA (A/B)"},
    {"TESSERA_LINEAR_RING", "1",
     "0: dense NVFP4 / FP8 projections of 2-16 tokens and 4096 rows or more on sm_90a run on the register-streaming "
     "kernels (matrix-vector, "
     "quant_linear_mma_kernel) instead of the shared-memory ring with K split over a cluster (A/B)"},
    {"TESSERA_EXPERT_EARLY_DOWN", "1",
     "0: the quantized routed experts' down projection waits for the gate/up kernel before it reads its routing and "
     "weights, instead of only before the activations (A/B)"},
    {"TESSERA_EXPERT_WEIGHTS_A", "1",
     "0: the quantized expert kernels use the activations as the MMA's A operand (16-pair tiles) instead of the "
     "weights (8-pair tiles; the ring kernels at every step size, the register-streaming ones at decode sizes) (A/B)"},
    {"TESSERA_MLA_PREFILL_PRECISION", "auto",
     "MLA prefill attention operands: auto (split for contexts of up to 2048 positions, bf16 beyond), split "
     "(bf16 hi + lo, near fp32, at every length) or bf16 (faster, less exact, at every length)"},
    {"TESSERA_MLA_PREFILL_QUERY_ROWS", "128",
     "query rows an MLA prefill attention block of the mma.sync kernel takes in bf16 precision: 128 (K and V read "
     "once for twice the rows; 14% faster than 64 at 8k context on an H100) or 64"},
    {"TESSERA_MLA_PREFILL_WGMMA", "1",
     "0: MLA prefill attention in bf16 precision on mma.sync instead of Hopper's warpgroup MMA (which takes SM90 "
     "GPUs with sm_90a code at DeepSeek-V3's head dims: 1.4-1.6x the mma.sync kernel on an H100) (A/B)"},
    {"TESSERA_SAMPLE_CLUSTERS", "1",
     "0: sampling reads a row with one block instead of a cluster of up to 8 (sm_90+; 33 against 158 us for a "
     "163840-token row at batch 1 on an H100) (A/B)"},
    {"TESSERA_SAMPLE_FEWER_PASSES", "1",
     "0: top-p sampling makes 7 passes over a row instead of 4 (its total in a pass of its own, a radix "
     "selection's last two passes over the row rather than the first pass's bin in shared memory; the same "
     "tokens; 670 against 548 us at batch 128 on an H100) (A/B)"},
    {"TESSERA_MLA_EARLY_KV", "1",
     "0: the KV-major MLA decode kernel of a decode step waits for the kernel before it to finish (an ordinary launch) "
     "instead of starting beside it and copying the cache rows of earlier steps first (A/B)"},
    {"TESSERA_MLA_WGMMA_EARLY", "1",
     "0: the wgmma MLA decode kernel (SM90, 64 heads a block) of a decode step waits for the kernel before it "
     "before its first cache tiles' copies, instead of only before q (A/B)"},
    {"TESSERA_STREAM_PRIORITIES", "0",
     "1: the CUDA backend's stream runs at the device's highest priority, above the second stream of the shared "
     "expert, so the router's and the routed experts' waiting blocks get SMs first (graphs keep it; an "
     "experiment; A/B)"},
    {"TESSERA_MLA_WGMMA_PAIRS", "0",
     "1: each context split of the wgmma MLA decode kernel (SM90, 64 heads a block) runs as a cluster of two "
     "blocks of half its positions that merge their halves through distributed shared memory, so a batch-1 step "
     "fills twice the SMs for the same partials (an experiment; A/B)"},
    {"TESSERA_MLA_DECODE_CLUSTERS", "0",
     "1: the KV-major MLA decode kernel's context splits run in clusters of up to 8 (sm_90+) that merge their "
     "partials through distributed shared memory, so the combine reads one partial a cluster, or none runs (an "
     "experiment, slower on an H100: 44 against 31 us at batch 1, 8 heads and 32k context; A/B)"},
    {"TESSERA_MLA_PREFILL_PASS_ROWS", "",
     "context positions an MLA prefill pass holds (default: as many as fit 256 MiB of K/V; tests force passes)"},
    {"TESSERA_ALL_REDUCE", "auto",
     "ranks on a GPU each: auto (one-shot over peer memory up to the size it measured faster at start-up, NCCL "
     "above), nccl, or one-shot (every message its buffers hold) (A/B)"},
    {"TESSERA_GEMM_ALGO_BUCKETS", "1",
     "0: a cuBLASLt GEMM of a new token count asks the heuristic (tens of µs on the host) instead of borrowing the "
     "algorithm chosen for its bucket (four an octave); a fresh 8192-token prompt's prefill took 143 ms that way "
     "against 94 on an H100 (A/B)"},
    {"TESSERA_DEVICE_POOL", "", "exact: one cudaMalloc per tensor, for compute-sanitizer (slow; no CUDA graphs)"},
    {"TESSERA_NUM_THREADS", "", "CPU backend threads (default: every hardware thread)"},
    {"TESSERA_CUPTI_LIBRARY", "", "path of libcupti.so for bench decode --trace, tried before the usual names"},
    {"TESSERA_DEMO_TOKENIZER", "",
     "directory of the built-in demo model's tokenizer (default: the one scripts/setup.sh installs)"},
    {"TESSERA_FIXTURES", "", "tests and benchmarks: the fixtures directory (default: ../shared/fixtures)"},
    {"TESSERA_BINARY", "", "tests: the tessera binary to run (default: the one in the build tree)"},
    {"TESSERA_SERVER_TEST_DIR", "", "tests: where server tests keep their scratch files (default: the temp dir)"},
    {"TESSERA_REQUIRE_GPU", "",
     "tests: 1 makes a GPU or end-to-end test that would skip (no GPU, no node) fail instead; for the GPU machine"},
}};

}  // namespace

std::span<const EnvSwitch> env_switches() { return kSwitches; }

std::optional<std::string> env_value(std::string_view name) {
  for (const EnvSwitch& s : kSwitches) {
    if (name != s.name) continue;
    const char* v = std::getenv(s.name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }
  fail("environment variable {} is read but not declared in core/env.cpp", name);
}

bool env_switch_on(std::string_view name) {
  const auto v = env_value(name);
  return !v || *v != "0";
}

namespace {
// The environment's value of declared switch `name`, else the table's default.
std::string value_or_default(std::string_view name) {
  if (auto v = env_value(name)) return *v;
  for (const EnvSwitch& s : kSwitches)
    if (name == s.name) return s.default_value;
  return "";
}
}  // namespace

bool env_flag(std::string_view name) {
  const std::string v = value_or_default(name);
  TESSERA_CHECK(v == "0" || v == "1", "{}={}: expected 0 or 1", name, v);
  return v == "1";
}

int env_int(std::string_view name, int lo, int hi) {
  const std::string v = value_or_default(name);
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  TESSERA_CHECK(!v.empty() && ec == std::errc() && end == v.data() + v.size() && n >= lo && n <= hi,
                "{}={}: expected a whole number from {} to {}", name, v, lo, hi);
  return n;
}

}  // namespace tessera::core
