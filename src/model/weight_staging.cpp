#include "model/weight_staging.h"

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace tessera::model {

namespace {

// Room to read ahead of the uploads: enough to keep many reads in flight while one tensor is
// copied, small next to any host's memory.
constexpr size_t kArenaBytes = size_t{1} << 30;
// How often progress is reported while loading.
constexpr auto kReportEvery = std::chrono::milliseconds(250);

}  // namespace

int WeightStaging::default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(hw == 0 ? 4 : hw, 2, 16));
}

WeightStaging::WeightStaging(const io::Checkpoint& ckpt, const ModelWeights& w, ops::Ops& backend,
                             LoadProgressFn progress, int threads)
    : progress_(std::move(progress)), start_(std::chrono::steady_clock::now()), last_report_(start_) {
  std::vector<io::FileRange> ranges;
  uint64_t largest_pair = 0;
  auto plan = [&](const core::Tensor& t) -> uint64_t {
    if (!t.defined() || t.nbytes() == 0 || t.device() != core::Device::kCpu) return 0;
    auto r = ckpt.locate(t.raw(), t.nbytes());
    if (!r) return 0;
    ranges.push_back(std::move(*r));
    sources_.push_back(t.raw());
    total_ += t.nbytes();
    return t.nbytes();
  };
  visit_weights(
      w, plan, plan, [&](const ops::LinearWeight& l, ops::LinearUse) {
        const uint64_t weight = plan(l.weight), scale = plan(l.scale);
        if (weight && scale) largest_pair = std::max(largest_pair, weight + scale);
      });
  // A linear's weight and scale are held together while it uploads: with twice their size the
  // ring always has room for the second whatever the first's place (see StagedReader).
  const size_t arena = std::max<size_t>(kArenaBytes, static_cast<size_t>(2 * largest_pair));
  auto alloc = [&backend](size_t bytes) { return backend.staging_host_buffer(bytes); };
  reader_ = std::make_unique<io::StagedReader>(std::move(ranges), alloc, arena,
                                               threads > 0 ? threads : default_threads());
  if (progress_) progress_({0, total_, 0.0, false});
}

WeightStaging::Held WeightStaging::take(const core::Tensor& t) {
  Held h;
  h.view = t;
  if (next_ >= sources_.size() || !t.defined() || t.raw() != sources_[next_]) return h;
  const void* bytes = reader_->take(next_);
  h.view = core::Tensor::view(t.dtype(), t.shape(), const_cast<void*>(bytes));
  h.owner_ = this;
  h.index_ = next_++;
  return h;
}

WeightStaging::Held::~Held() {
  if (owner_) owner_->released(index_);
}

void WeightStaging::released(size_t index) {
  reader_->release(index);
  done_ += reader_->range(index).bytes;
  const auto now = std::chrono::steady_clock::now();
  if (progress_ && now - last_report_ >= kReportEvery) {
    last_report_ = now;
    progress_({done_, total_, std::chrono::duration<double>(now - start_).count(), false});
  }
}

void WeightStaging::finish() {
  if (progress_)
    progress_({done_, total_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
               true});
}

}  // namespace tessera::model
