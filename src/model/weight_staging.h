// Where uploads read the checkpoint's bytes from. A backend that keeps host weights (the CPU
// reference) uses the mapped checkpoint directly. A backend that copies them to a device gets them
// through an io::StagedReader: many threads read every tensor the upload walk will ask for, in that
// order, into pinned host memory ahead of the uploads, so reading and copying to the GPU overlap
// and run at storage speed instead of one thread faulting in mapped pages. Every weight and scale
// with a float encoding is checked for NaN and infinity by the reader that reads it (take() throws
// naming the file, tensor and element); check_weights_finite() is the same check for a backend that
// keeps the mapping.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "io/staged_reader.h"
#include "model/deepseek_v3_weights.h"
#include "model/model.h"

namespace tessera::model {

// Checks every tensor of `w` that lives in `ckpt`'s mapping for NaN and infinity, in parallel on the
// core thread pool: what load_model runs for a backend that does not copy its weights (the staged
// loader checks them as it reads). Throws core::Error naming the file, tensor and first bad element.
void check_weights_finite(const io::Checkpoint& ckpt, const ModelWeights& w);

class WeightStaging {
 public:
  // Plans the reads of every tensor of `w` that lives in `ckpt`'s mapping, in visit_weights order,
  // and starts reading. `threads` <= 0: as many as the machine has cores, at most 16.
  WeightStaging(const io::Checkpoint& ckpt, const ModelWeights& w, ops::Ops& backend, LoadProgressFn progress,
                int threads = 0);
  // The reader threads when none are asked for: one per core, at least 2, at most 16 (`bench load`
  // reads with as many).
  static int default_threads();

  // A staged tensor: `view` holds the bytes of the tensor asked for until this is destroyed.
  class Held {
   public:
    Held() = default;
    Held(Held&& o) noexcept : owner_(o.owner_), index_(o.index_), view(std::move(o.view)) { o.owner_ = nullptr; }
    Held& operator=(Held&&) = delete;
    ~Held();

   private:
    friend class WeightStaging;
    WeightStaging* owner_ = nullptr;
    size_t index_ = 0;

   public:
    core::Tensor view;
  };
  // The bytes of `t` in staged memory; `t` itself when it is not the next tensor the walk planned
  // (a tensor already on the device, or not from this checkpoint).
  Held take(const core::Tensor& t);

  uint64_t total_bytes() const { return total_; }
  // Sends the final progress report (finished = true).
  void finish();

 private:
  void released(size_t index);

  std::unique_ptr<io::StagedReader> reader_;
  std::vector<const void*> sources_;  // the mapped view each planned range was found from
  size_t next_ = 0;
  uint64_t total_ = 0, done_ = 0;
  LoadProgressFn progress_;
  std::chrono::steady_clock::time_point start_, last_report_;
};

}  // namespace tessera::model
