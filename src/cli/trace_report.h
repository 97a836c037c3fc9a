// A traced stretch of work on the device clock, for the bench commands' --trace: the span from its
// first kernel's start to its last one's end, the time no kernel ran (the host between steps:
// scheduling, launches, anything read back), and per kernel name its share of the busy time
// (kernels running at once split it evenly, so the shares add up to it), calls and running time.
#pragma once

#ifdef TESSERA_HAVE_CUDA
#include <cstddef>
#include <string>
#include <vector>

#include "ops/cuda/tools/kernel_trace.h"

namespace tessera::cli {

// Prints `title`, then the span, busy and idle times, then the `rows` kernel names with the largest
// shares (the rest summed on one line).
void print_kernel_totals(const std::vector<ops::cuda::KernelSpan>& spans, const std::string& title, size_t rows = 30);

}  // namespace tessera::cli
#endif
