// tessera bench load: how fast the loader brings a checkpoint's weights onto the backend, next to a
// plain parallel read of the same files measured in the same run (the storage's own speed), from
// the page cache or, with --cold, from storage.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cli/command.h"
#include "cli/load_progress.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "io/staged_reader.h"
#include "model/weight_staging.h"

namespace tessera::cli {
namespace {

struct BenchLoadArgs {
  ModelOptions model;
  int threads = 0;
  bool cold = false;
};

using Clock = std::chrono::steady_clock;
constexpr double kGB = 1e9;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Drops the files from the page cache: the whole cache where allowed (root), else each file's
// pages; false (and a warning) where neither worked.
bool drop_all(const std::vector<std::filesystem::path>& files) {
  if (io::drop_whole_page_cache()) return true;
  bool ok = true;
  for (const auto& f : files) ok &= io::drop_from_page_cache(f);
  if (!ok) std::printf("warning: could not drop every file from the page cache: reads may be warm\n");
  return ok;
}

int run(const BenchLoadArgs& a) {
  const int threads = a.threads > 0 ? a.threads : model::WeightStaging::default_threads();
  const auto files = io::Checkpoint::open(a.model.model_dir)->files();

  // Warm: both from the page cache (one read first puts the files there, where memory allows);
  // cold: each starts with the files dropped from it.
  if (a.cold)
    drop_all(files);
  else
    (void)io::read_files_in_parallel(files, threads);
  model::LoadOptions lo = a.model.load_options();
  lo.load_threads = threads;
  model::LoadProgress last;
  auto show = stderr_load_progress();
  const auto t_load = Clock::now();
  {
    model::LoadedModel m = model::load_model(a.model.model_dir, lo, [&](const model::LoadProgress& p) {
      show(p);
      last = p;
    });
  }
  const double load_total = seconds_since(t_load);

  if (a.cold) drop_all(files);
  const auto t_read = Clock::now();
  const uint64_t read_bytes = io::read_files_in_parallel(files, threads);
  const double read_s = seconds_since(t_read);

  const double read_rate = static_cast<double>(read_bytes) / kGB / read_s;
  const double load_rate = last.seconds > 0 ? static_cast<double>(last.bytes_done) / kGB / last.seconds : 0;
  std::printf("bench load: %s, %zu files, device %s, %d threads, %s cache\n", a.model.model_dir.c_str(), files.size(),
              a.model.device.c_str(), threads, a.cold ? "cold" : "warm");
  std::printf("  plain parallel read: %.2f GB in %.2f s = %.2f GB/s\n", static_cast<double>(read_bytes) / kGB, read_s,
              read_rate);
  std::printf("  loader (weights):    %.2f GB in %.2f s = %.2f GB/s (%.0f%% of the plain read)\n",
              static_cast<double>(last.bytes_done) / kGB, last.seconds, load_rate,
              read_rate > 0 ? 100 * load_rate / read_rate : 0.0);
  std::printf("  load_model in all:   %.2f s (configs, headers, backend start, weights)\n", load_total);
  return 0;
}

CommandRegistration reg{
    {"load", "loading speed: the loader against a plain parallel read of the same files",
     [](CLI::App& app) {
       auto a = std::make_shared<BenchLoadArgs>();
       a->model.add_to(app);
       app.add_option("--threads", a->threads, "reader threads (default: one per core, at most 16)");
       app.add_flag("--cold", a->cold, "drop the files from the page cache before each measurement (posix_fadvise)");
       return [a] { return run(*a); };
     },
     "bench"}};

}  // namespace
}  // namespace tessera::cli
