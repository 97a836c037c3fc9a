// Decode steps recorded once as CUDA graphs and replayed: a decode step of a 61-layer model is ~850
// kernel launches, each a few microseconds of host time, which bounds small batches and small
// per-GPU shards by the CPU; one graph launch replaces them.
//
// How a step of a given key (the model passes its token count) runs:
//  1. The first time, as usual (eager): lazily built state (expert tables, GEMM plans, kernel
//     attributes, the second stream) is made outside any capture.
//  2. The second time, recorded: the stream is captured into a graph while the step runs; its
//     tensors come from GraphMemory, its uploads are staged there (and copied to the device in one
//     go before the graph is launched), and every operation's signature goes on the key's tape
//     (launch_gate.h).
//  3. After that, replayed: the step's host code runs again (the model, the ops' checks, this step's
//     uploads staged at the same places) with every operation held back and checked against the
//     tape. If all match, the staged inputs are copied and the graph is launched. If any differs
//     (the attention's split count changed as contexts grew), the step is recorded again.
// A step that cannot be captured (one that reads the device back to the host) runs eagerly from
// then on for that key. The returned tensor (the logits) lives in GraphMemory: it is valid until the
// next recorded or replayed step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "ops/cuda/cuda_ops.h"  // StepGraphStats
#include "ops/cuda/runtime/launch_gate.h"

namespace tessera::ops::cuda {

// Memory of recorded steps. A graph bakes in the address of every tensor its step allocates and of
// every staged upload it copies from, so a replay must be handed the same addresses: the pool
// restarts from all-free at each recorded or replayed step and an allocation takes the oldest free
// block of its size class, so the same sequence of allocations and releases yields the same
// addresses, whatever other keys recorded in between (they only add newer blocks). Staging is a
// bump allocator over pinned chunks with device mirrors, restarted the same way. Nothing is given back to the driver
// while the backend lives; steps run one at a time, so all keys share the memory.
class GraphMemory {
 public:
  GraphMemory();
  std::shared_ptr<void> allocate(size_t bytes);
  // An upload of a recorded step: `bytes` from `src` copied into pinned memory now, and the device
  // memory the step's kernels read it from, which upload_staged() fills before each launch of the
  // graph (the graph holds no copies: a copy node between kernels costs ~90 µs of idle GPU on an
  // H200, and it breaks the programmatic launch chain). Valid until the next restart.
  struct Staged {
    void* host;
    std::shared_ptr<void> device;
  };
  Staged stage(const void* src, size_t bytes);
  // Copies everything staged since the restart to its device memory, on `stream`.
  void upload_staged(cudaStream_t stream);
  // Every block free again: tensors still held from the previous step must no longer be used.
  void restart();
  size_t device_bytes() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class StepGraphs {
 public:
  explicit StepGraphs(cudaStream_t stream);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs `step` (all of its stream work on the stream given at construction, or on streams that it
  // forks from and joins back into that one) as described above.
  core::Tensor run(int64_t key, const std::function<core::Tensor()>& step);
  // A point in the step where nothing runs on a second stream (Ops::step_boundary). A recorded step
  // is cut there into segments (after 1, 2, 4, ... boundaries): a replay launches each segment as
  // soon as its part of the step has been checked, so the GPU starts after the first part's check
  // rather than after the whole step's.
  void boundary();
  // True while a step is recorded or replayed: the backend then allocates and stages from memory().
  bool active() const { return active_; }
  // True while a recorded step is replayed (its operations checked, not issued).
  bool replaying() const { return active_ && checking_; }
  GraphMemory& memory() { return memory_; }
  const StepGraphStats& stats() const { return stats_; }

 private:
  struct Segment {
    cudaGraphExec_t exec = nullptr;
    size_t tape_end = 0;  // the tape's length where it ends
  };
  struct Graph {
    std::vector<Segment> segments;
    StepTape tape;
    bool warmed = false;  // ran once eagerly
    bool never = false;   // cannot be captured: always eager
  };
  core::Tensor record(Graph& g, const std::function<core::Tensor()>& step);
  // False when the step's operations differ from the recording (then segments before the
  // difference may have been launched: launched_ says how many).
  bool replay(Graph& g, const std::function<core::Tensor()>& step, core::Tensor& out);
  // Ends a recording that threw; true when the capture had been invalidated (the step cannot be
  // captured), false when the step itself failed.
  bool abandon_recording(Graph& g);
  // Marks the key as never to be recorded and runs the step as usual.
  core::Tensor run_without_graph(Graph& g, const std::function<core::Tensor()>& step);
  void begin(Graph& g, bool checking);
  void end();
  void launch(const Segment& segment);
  void close_segment();
  void begin_scratch();
  bool end_scratch();
  static void drop_segments(Graph& g);

  cudaStream_t stream_;
  cudaEvent_t done_ = nullptr;  // after the last graph launch: staging may be rewritten once it fired
  GraphMemory memory_;
  std::map<int64_t, Graph> graphs_;
  StepGraphStats stats_;
  // The step in progress.
  Graph* current_ = nullptr;
  bool active_ = false, checking_ = false, diverged_ = false;
  int64_t boundaries_ = 0;
  size_t launched_ = 0;  // segments launched
};

}  // namespace tessera::ops::cuda
