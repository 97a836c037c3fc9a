// Before a server answers: one prompt through the started engine, as long as a step takes, so that
// what a full step needs happens at start-up and not to the first long request. On a GPU that is
// the step's memory (a plan that was wrong fails here, with the flags to change, instead of in the
// middle of serving), the CUDA modules of its kernels (loaded on first use) and the cuBLASLt
// algorithms of its GEMM shapes (chosen on first use). Without one, `bench offline` of six fresh
// 4096-token prompts on an H100 had a TTFT p90 / p99 of 192 / 320 ms against a median of 49 ms.
#pragma once

#include <cstdint>

#include "engine/engine.h"

namespace tessera::engine {

// The warm-up prompt's length for `serve --warmup-tokens requested`: -1 (auto) is one full step
// (max_num_batched_tokens) on a GPU backend and none on the CPU (nothing to load there, and its
// steps are slow); 0 is none; any length is capped at max_model_len - 1 (the prompt and its one
// token). Throws core::Error for other negative values.
int64_t warmup_tokens(int64_t requested, bool gpu, const EngineConfig& config);

// Runs a prompt of `tokens` token ids (spread over [0, vocab)) with max_tokens 1 through a started
// engine and waits for its token; returns the seconds it took. Throws core::Error naming the
// length and the flags to change when the prompt ends without its token (the failed step's cause
// is in the engine's log above).
double warm_up(Engine& eng, int64_t tokens, int64_t vocab);

}  // namespace tessera::engine
