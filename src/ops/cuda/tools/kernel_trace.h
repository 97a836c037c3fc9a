// The device's own start and end times of every kernel a stretch of work runs, overlaps kept:
// kernels that start early under programmatic dependent launch, or run on a second stream, overlap
// here as they did on the GPU (ncu runs kernels one at a time, which hides exactly that). Built on
// CUPTI's activity API, which is loaded when a trace starts (libcupti.so of the CUDA toolkit), so
// the binary does not depend on it otherwise. This header does not include CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::ops::cuda {

struct KernelSpan {
  std::string name;  // demangled, without the namespace and the parameter list
  uint32_t stream = 0;
  uint64_t start_ns = 0, end_ns = 0;  // device timestamps
};

// A kernel's (mangled) name as a trace shows it: demangled, without its return type, the
// tessera::ops::cuda and anonymous namespaces and its parameter list; a name that does not
// demangle is kept as it is, a null one is "?".
std::string kernel_display_name(const char* mangled);

// How long at least one of `spans` was running: the union of their intervals, in ns (overlapping
// kernels count once, gaps with none running not at all). Any order.
uint64_t busy_ns(const std::vector<KernelSpan>& spans);

// A trace's spans summed by kernel name: calls, their running time (each call in full) and their
// share of the busy time (busy_ns: while n kernels run at once, each has 1/n of that time, so the
// shares of all names sum to busy_ns(spans)); largest share first, then by name.
struct KernelTotal {
  std::string name;
  int64_t calls = 0;
  double run_ns = 0, share_ns = 0;
};
std::vector<KernelTotal> kernel_totals(const std::vector<KernelSpan>& spans);

// Records from construction until stop() (one trace at a time in a process). Throws core::Error
// when CUPTI cannot be loaded, naming what was tried (TESSERA_CUPTI_LIBRARY names the library).
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  // Waits for the device, stops recording and returns the kernels ordered by start (empty when
  // already stopped).
  std::vector<KernelSpan> stop();

 private:
  bool stopped_ = false;
};

}  // namespace tessera::ops::cuda
