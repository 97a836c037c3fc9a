#include "ops/cuda/tools/kernel_trace.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "core/env.h"
#include "core/error.h"

namespace tessera::ops::cuda {

namespace {

// The CUPTI entry points a trace uses, resolved from the library at the first trace.
struct Cupti {
  void* library = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

const Cupti& cupti() {
  static const Cupti loaded = [] {
    Cupti c;
    std::vector<std::string> tried;
    if (auto env = core::env_value("TESSERA_CUPTI_LIBRARY")) tried.push_back(*env);
    for (const char* name : {"libcupti.so", "libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so",
                             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"})
      tried.emplace_back(name);
    for (const auto& name : tried)
      if ((c.library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (c.library == nullptr)
      core::fail(
          "kernel trace: cannot load CUPTI (tried {}); set TESSERA_CUPTI_LIBRARY to the CUDA toolkit's "
          "libcupti.so",
          fmt::join(tried, ", "));
    auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(c.library, symbol));
      if (fn == nullptr) core::fail("kernel trace: the CUPTI library has no {}", symbol);
    };
    resolve(c.register_callbacks, "cuptiActivityRegisterCallbacks");
    resolve(c.enable, "cuptiActivityEnable");
    resolve(c.disable, "cuptiActivityDisable");
    resolve(c.flush_all, "cuptiActivityFlushAll");
    resolve(c.next_record, "cuptiActivityGetNextRecord");
    resolve(c.result_string, "cuptiGetResultString");
    return c;
  }();
  return loaded;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cupti().result_string(r, &text);
  core::fail("kernel trace: {} failed: {}", what, text != nullptr ? text : "unknown CUPTI error");
}

}  // namespace

uint64_t busy_ns(const std::vector<KernelSpan>& spans) {
  std::vector<std::pair<uint64_t, uint64_t>> by_start;
  for (const auto& k : spans) by_start.emplace_back(k.start_ns, std::max(k.start_ns, k.end_ns));
  std::sort(by_start.begin(), by_start.end());
  uint64_t busy = 0, covered_to = 0;
  for (const auto& [start, end] : by_start) {
    if (end <= covered_to) continue;
    busy += end - std::max(covered_to, start);
    covered_to = end;
  }
  return busy;
}

std::vector<KernelTotal> kernel_totals(const std::vector<KernelSpan>& spans) {
  // Sweep the starts and ends in time order (an end before a start at the same time), keeping the
  // running spans; each stretch between two events goes to them in equal parts.
  struct Event {
    uint64_t t;
    bool start;
    size_t span;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].end_ns <= spans[i].start_ns) continue;  // empty: runs no time
    events.push_back({spans[i].start_ns, true, i});
    events.push_back({spans[i].end_ns, false, i});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.t != b.t ? a.t < b.t : (!a.start && b.start); });
  std::vector<double> share(spans.size(), 0.0);
  std::vector<size_t> running;
  uint64_t prev = 0;
  for (const Event& e : events) {
    if (!running.empty() && e.t > prev) {
      const double part = static_cast<double>(e.t - prev) / static_cast<double>(running.size());
      for (size_t r : running) share[r] += part;
    }
    prev = e.t;
    if (e.start)
      running.push_back(e.span);
    else
      running.erase(std::find(running.begin(), running.end(), e.span));
  }
  std::map<std::string, KernelTotal> by_name;
  for (size_t i = 0; i < spans.size(); ++i) {
    KernelTotal& t = by_name[spans[i].name];
    t.name = spans[i].name;
    t.calls += 1;
    t.run_ns += spans[i].end_ns > spans[i].start_ns ? static_cast<double>(spans[i].end_ns - spans[i].start_ns) : 0.0;
    t.share_ns += share[i];
  }
  std::vector<KernelTotal> out;
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelTotal& a, const KernelTotal& b) { return a.share_ns > b.share_ns; });
  return out;
}

// "void tessera::ops::cuda::(anonymous namespace)::router_fused_kernel<12, false>(float const*, ...)"
// -> "router_fused_kernel<12, false>".
std::string kernel_display_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  std::string s = status == 0 && d ? d.get() : mangled;
  // The parameter list: the last '(' at template depth 0.
  int depth = 0;
  size_t params = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && s.compare(i, 11, "(anonymous ") != 0) params = i;
  }
  if (params != std::string::npos) s.resize(params);
  // The return type and the namespaces in front of the name, in whatever order they come.
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string prefix : {"void ", "tessera::ops::cuda::", "(anonymous namespace)::"})
      if (s.rfind(prefix, 0) == 0) {
        s.erase(0, prefix.size());
        stripped = true;
      }
  }
  return s;
}

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
std::mutex g_mu;                  // guards the two below: CUPTI completes buffers on its own thread
bool g_recording = false;         // a trace is running
std::vector<KernelSpan> g_spans;  // its kernels so far

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (g_recording) g_spans.push_back({kernel_display_name(k->name), k->streamId, k->start, k->end});
  }
  std::free(buffer);
}

}  // namespace

KernelTrace::KernelTrace() {
  const Cupti& c = cupti();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    TESSERA_CHECK(!g_recording, "kernel trace: one trace at a time");
    g_spans.clear();
    g_recording = true;
  }
  try {
    check(c.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    // Concurrent kernel records keep kernels overlapping (the plain kernel kind serialises them).
    check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_recording = false;
    throw;
  }
}

KernelTrace::~KernelTrace() {
  try {
    (void)stop();
  } catch (...) {  // a destructor does not throw; the trace is dropped
  }
}

std::vector<KernelSpan> KernelTrace::stop() {
  if (stopped_) return {};
  stopped_ = true;
  (void)cudaDeviceSynchronize();
  const Cupti& c = cupti();
  const CUptiResult flushed = c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const CUptiResult disabled = c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::vector<KernelSpan> spans;
  {
    std::lock_guard<std::mutex> lock(g_mu);  // the next trace may start even if this one failed
    spans.swap(g_spans);
    g_recording = false;
  }
  check(flushed, "cuptiActivityFlushAll");
  check(disabled, "cuptiActivityDisable");
  std::sort(spans.begin(), spans.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  return spans;
}

}  // namespace tessera::ops::cuda
