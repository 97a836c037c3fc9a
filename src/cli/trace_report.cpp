#include "cli/trace_report.h"

#ifdef TESSERA_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>

namespace tessera::cli {

void print_kernel_totals(const std::vector<ops::cuda::KernelSpan>& spans, const std::string& title, size_t rows) {
  if (spans.empty()) {
    fmt::print("\n{}: no kernel was traced\n", title);
    return;
  }
  uint64_t first = spans.front().start_ns, last = spans.front().end_ns;
  for (const auto& k : spans) {
    first = std::min(first, k.start_ns);
    last = std::max(last, k.end_ns);
  }
  const double span = static_cast<double>(last - first), busy = static_cast<double>(ops::cuda::busy_ns(spans));
  fmt::print(
      "\n{} (device clock): span {:.2f} ms from the first kernel's start to the last one's end, kernels running "
      "{:.2f} ms, none running {:.2f} ms ({:.1f}%), {} kernels\n",
      title, span / 1e6, busy / 1e6, (span - busy) / 1e6, span > 0 ? 100 * (span - busy) / span : 0.0, spans.size());
  fmt::print("{:>9} {:>7} {:>7} {:>9} {:>9}  {}\n", "share ms", "% busy", "calls", "run ms", "µs a call", "kernel");
  const std::vector<ops::cuda::KernelTotal> totals = ops::cuda::kernel_totals(spans);
  double rest_share = 0, rest_run = 0;
  int64_t rest_calls = 0;
  const auto pct = [&](double v) { return busy > 0 ? 100 * v / busy : 0.0; };
  for (size_t i = 0; i < totals.size(); ++i) {
    const auto& t = totals[i];
    if (i >= rows) {
      rest_share += t.share_ns, rest_run += t.run_ns, rest_calls += t.calls;
      continue;
    }
    fmt::print("{:>9.3f} {:>6.1f}% {:>7} {:>9.3f} {:>9.1f}  {}\n", t.share_ns / 1e6, pct(t.share_ns), t.calls,
               t.run_ns / 1e6, t.run_ns / 1e3 / static_cast<double>(t.calls), t.name.substr(0, 110));
  }
  if (totals.size() > rows)
    fmt::print("{:>9.3f} {:>6.1f}% {:>7} {:>9.3f} {:>9}  ({} other kernels)\n", rest_share / 1e6, pct(rest_share),
               rest_calls, rest_run / 1e6, "", totals.size() - rows);
}

}  // namespace tessera::cli
#endif
