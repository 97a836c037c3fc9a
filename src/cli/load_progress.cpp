#include "cli/load_progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "core/log.h"

namespace tessera::cli {

namespace {

constexpr double kGB = 1e9;
// Without a terminal each report is a new line: one every few seconds is enough for a log.
constexpr double kLogEverySeconds = 5.0;

}  // namespace

model::LoadProgressFn stderr_load_progress() {
  if (core::log_format() == core::LogFormat::kJson) {
    // A log collector reads every stderr line as a JSON record: the progress goes through the log.
    auto last_logged = std::make_shared<double>(-kLogEverySeconds);
    return [last_logged](const model::LoadProgress& p) {
      if (!p.finished && p.seconds - *last_logged < kLogEverySeconds) return;
      *last_logged = p.seconds;
      const double done = static_cast<double>(p.bytes_done) / kGB, total = static_cast<double>(p.bytes_total) / kGB;
      spdlog::info("{} {:.1f} / {:.1f} GB of weights in {:.1f} s ({:.2f} GB/s)", p.finished ? "loaded" : "loading",
                   done, total, p.seconds, p.seconds > 0 ? done / p.seconds : 0.0);
    };
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_logged = std::make_shared<double>(-kLogEverySeconds);
  return [tty, last_logged](const model::LoadProgress& p) {
    const double done = static_cast<double>(p.bytes_done) / kGB, total = static_cast<double>(p.bytes_total) / kGB;
    const double rate = p.seconds > 0 ? done / p.seconds : 0;
    if (p.finished) {
      std::fprintf(stderr, "%sloaded %.1f GB of weights in %.1f s (%.2f GB/s)\n", tty ? "\r\033[K" : "", done,
                   p.seconds, rate);
      std::fflush(stderr);
      return;
    }
    if (!tty && p.seconds - *last_logged < kLogEverySeconds) return;
    *last_logged = p.seconds;
    const std::string eta = rate > 0 ? fmt::format(", {:.0f} s left", (total - done) / rate) : "";
    std::fprintf(stderr, "%sloading weights: %.1f / %.1f GB (%.0f%%), %.2f GB/s%s%s", tty ? "\r\033[K" : "", done,
                 total, total > 0 ? 100 * done / total : 0.0, rate, eta.c_str(), tty ? "" : "\n");
    std::fflush(stderr);
  };
}

}  // namespace tessera::cli
