// Launcher of the sampling kernel (sampling.cu), the CUDA side of Ops::sample. Plain pointers,
// so the backend class can be compiled by the host compiler.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sampling_rule.h"

namespace tessera::ops::cuda {

// The rows of logits [rows, vocab] (fp32, vocab <= sampling::kMaxVocab), `blocks_per_row` blocks
// each (sample_blocks_per_row); `params` holds the rows' SampleRow in device memory, already checked
// (check_sample_args). Writes ids[rows] and, when `logprobs` is not null, logprobs[rows]. Same
// tokens as the CPU reference, bit for bit, whatever blocks_per_row. `fewer_passes`
// (TESSERA_SAMPLE_FEWER_PASSES): top-p's total mass from its first radix pass, and a radix
// selection's last two passes over the first pass's bin in shared memory (sampling.cu).
// logits [rows, vocab] = -inf where the token's bit is clear in `bitmask` (rows x ceil(vocab / 32)
// words, device memory): Ops::mask_logits.
void launch_mask_logits(float* logits, int64_t rows, int64_t vocab, const uint32_t* bitmask, cudaStream_t s);
void launch_sample(const float* logits, int64_t rows, int64_t vocab, const SampleRow* params, int32_t* ids,
                   float* logprobs, int blocks_per_row, bool fewer_passes, cudaStream_t s);
// Blocks a row of `rows` gets on a device of compute capability `sm` with `num_sms` SMs: a cluster
// of up to 8 (sm_90+) while the rows' clusters still fit the SMs once, else 1.
int sample_blocks_per_row(int64_t rows, int sm, int num_sms);

}  // namespace tessera::ops::cuda
