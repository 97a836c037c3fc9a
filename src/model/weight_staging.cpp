#include "model/weight_staging.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/finite_check.h"
#include "core/thread_pool.h"

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

void check_weights_finite(const io::Checkpoint& ckpt, const ModelWeights& w) {
  struct Piece {
    const uint8_t* data;
    uint64_t elements;
    core::DType dtype;
    size_t tensor;         // index into `tensors`
    uint64_t first_index;  // of its first element in the tensor
  };
  constexpr uint64_t kPieceBytes = uint64_t{8} << 20;
  std::vector<io::FileRange> tensors;
  std::vector<Piece> pieces;
  auto plan = [&](const core::Tensor& t) {
    if (!t.defined() || t.nbytes() == 0 || t.device() != core::Device::kCpu) return;
    if (!core::dtype_can_be_non_finite(t.dtype())) return;
    auto r = ckpt.locate(t.raw(), t.nbytes());
    if (!r) return;
    const uint64_t elem = core::dtype_size(t.dtype());
    const uint64_t step = kPieceBytes / elem;
    const auto* base = static_cast<const uint8_t*>(t.raw());
    const uint64_t n = t.nbytes() / elem;
    for (uint64_t at = 0; at < n; at += step)
      pieces.push_back(
          {base + at * elem, std::min(step, n - at), t.dtype(), tensors.size(), r->tensor_offset / elem + at});
    tensors.push_back(std::move(*r));
  };
  visit_weights(w, plan, plan, [&](const ops::LinearWeight& l, ops::LinearUse) {
    plan(l.weight);
    plan(l.scale);
  });
  std::vector<int64_t> bad(pieces.size(), -1);
  core::parallel_for(
      static_cast<int64_t>(pieces.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          bad[i] = core::first_non_finite(pieces[i].dtype, pieces[i].data, pieces[i].elements);
      },
      1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (bad[i] < 0) continue;
    const Piece& p = pieces[i];
    const io::FileRange& r = tensors[p.tensor];
    core::fail(
        "{}: tensor '{}': element {} is {}: a {} weight or scale must be a finite number (the file is corrupt, "
        "or was converted wrongly)",
        r.file.string(), r.tensor, p.first_index + static_cast<uint64_t>(bad[i]),
        core::describe_non_finite(p.dtype, p.data + static_cast<uint64_t>(bad[i]) * core::dtype_size(p.dtype)),
        core::dtype_name(p.dtype));
  }
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
    // Weights and scales with float encodings are checked for NaN / inf as they are read.
    r->dtype = t.dtype();
    r->check_finite = core::dtype_can_be_non_finite(t.dtype());
    ranges.push_back(std::move(*r));
    sources_.push_back(t.raw());
    total_ += t.nbytes();
    return t.nbytes();
  };
  visit_weights(w, plan, plan, [&](const ops::LinearWeight& l, ops::LinearUse) {
    const uint64_t weight = plan(l.weight), scale = plan(l.scale);
    if (weight && scale) largest_pair = std::max(largest_pair, weight + scale);
  });
  // A linear's weight and scale are held together while it uploads: with twice their size the
  // ring always has room for the second whatever the first's place (see StagedReader).
  const size_t arena = std::max<size_t>(kArenaBytes, static_cast<size_t>(2 * largest_pair));
  auto alloc = [&backend](size_t bytes) { return backend.staging_host_buffer(bytes); };
  reader_ =
      std::make_unique<io::StagedReader>(std::move(ranges), alloc, arena, threads > 0 ? threads : default_threads());
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
    progress_({done_, total_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), true});
}

}  // namespace tessera::model
