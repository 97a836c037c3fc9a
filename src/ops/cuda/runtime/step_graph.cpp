#include "ops/cuda/runtime/step_graph.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <set>
#include <vector>

#include "ops/cuda/kernels/kernels.h"
#include "ops/cuda/runtime/cuda_check.h"

namespace tessera::ops::cuda {

namespace {

// cudaMalloc and cudaHostAlloc are "potentially unsafe" while this thread captures a stream (they
// are not stream work, so a graph cannot replay them); ours are safe: the memory outlives every
// graph that uses it. Relaxed mode allows them for the scope of this object.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureScope() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

constexpr size_t kStageAlign = 256;
constexpr size_t kMinStageChunk = size_t{1} << 20;

}  // namespace

struct GraphMemory::State {
  struct SizeClass {
    std::vector<void*> blocks;  // in the order they were made
    std::set<size_t> free;      // indices into blocks
  };
  struct Chunk {
    char* host = nullptr;                     // pinned
    char* device = nullptr;                   // its mirror, which the graphs read
    size_t size = 0, used = 0, uploaded = 0;  // bytes staged by this step, and of those copied
  };
  std::map<size_t, SizeClass> classes;
  uint64_t generation = 0;  // tensors released after a restart are not returned twice
  size_t device_bytes = 0;
  std::vector<Chunk> chunks;
  size_t chunk = 0;  // staging position: the chunk being filled

  ~State() {
    for (auto& [size, c] : classes)
      for (void* p : c.blocks) cudaFree(p);
    for (auto& c : chunks) {
      cudaFreeHost(c.host);
      cudaFree(c.device);
    }
  }
};

GraphMemory::GraphMemory() : state_(std::make_shared<State>()) {}

std::shared_ptr<void> GraphMemory::allocate(size_t bytes) {
  State& st = *state_;
  const size_t size = std::bit_ceil(std::max<size_t>(bytes, 512));
  State::SizeClass& c = st.classes[size];
  size_t index = 0;
  if (!c.free.empty()) {
    index = *c.free.begin();
    c.free.erase(c.free.begin());
  } else {
    void* p = nullptr;
    {
      RelaxedCaptureScope relaxed;
      TESSERA_CUDA_CHECK(cudaMalloc(&p, size));
    }
    c.blocks.push_back(p);
    index = c.blocks.size() - 1;
    st.device_bytes += size;
  }
  return std::shared_ptr<void>(c.blocks[index], [state = state_, size, index, gen = st.generation](void*) {
    if (state->generation == gen) state->classes[size].free.insert(index);
  });
}

GraphMemory::Staged GraphMemory::stage(const void* src, size_t bytes) {
  State& st = *state_;
  const size_t need = std::max<size_t>((bytes + kStageAlign - 1) / kStageAlign * kStageAlign, kStageAlign);
  for (;;) {
    if (st.chunk == st.chunks.size()) {
      State::Chunk c;
      c.size = std::max(kMinStageChunk, need);
      RelaxedCaptureScope relaxed;
      TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&c.host), c.size, cudaHostAllocDefault));
      TESSERA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&c.device), c.size));
      st.chunks.push_back(c);
    }
    State::Chunk& c = st.chunks[st.chunk];
    if (c.size - c.used >= need) break;
    ++st.chunk;
  }
  State::Chunk& c = st.chunks[st.chunk];
  Staged out{c.host + c.used, std::shared_ptr<void>(state_, c.device + c.used)};
  if (bytes > 0) std::memcpy(out.host, src, bytes);
  c.used += need;
  return out;
}

void GraphMemory::upload_staged(cudaStream_t stream) {
  for (State::Chunk& c : state_->chunks) {
    if (c.used > c.uploaded)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(c.device + c.uploaded, c.host + c.uploaded, c.used - c.uploaded,
                                         cudaMemcpyHostToDevice, stream));
    c.uploaded = c.used;
  }
}

void GraphMemory::restart() {
  State& st = *state_;
  ++st.generation;
  for (auto& [size, c] : st.classes) {
    c.free.clear();
    for (size_t i = 0; i < c.blocks.size(); ++i) c.free.insert(c.free.end(), i);
  }
  st.chunk = 0;
  for (auto& c : st.chunks) c.used = c.uploaded = 0;
}

size_t GraphMemory::device_bytes() const { return state_->device_bytes; }

namespace {
// Thrown out of a step when its capture cannot go on (the step then runs without a graph).
struct CaptureFailed {
  cudaError_t error;
};
}  // namespace

StepGraphs::StepGraphs(cudaStream_t stream) : stream_(stream) {
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

StepGraphs::~StepGraphs() {
  for (auto& [key, g] : graphs_) drop_segments(g);
  cudaEventDestroy(done_);
}

void StepGraphs::drop_segments(Graph& g) {
  for (Segment& s : g.segments)
    if (s.exec != nullptr) cudaGraphExecDestroy(s.exec);
  g.segments.clear();
}

void StepGraphs::begin(Graph& g, bool checking) {
  memory_.restart();
  if (checking)
    g.tape.start_checking();
  else
    g.tape.start_recording();
  active_tape() = &g.tape;
  current_ = &g;
  active_ = true;
  checking_ = checking;
  boundaries_ = 0;
  launched_ = 0;
  diverged_ = false;
}

void StepGraphs::end() {
  active_tape() = nullptr;
  current_ = nullptr;
  active_ = false;
  checking_ = false;
}

void StepGraphs::launch(const Segment& segment) {
  memory_.upload_staged(stream_);
  TESSERA_CUDA_CHECK(cudaGraphLaunch(segment.exec, stream_));
  ++launched_;
}

// Replays check under a scratch capture of the stream: an operation that bypassed the tape would
// otherwise run at once, ahead of the graph; captured, it is caught here instead.
void StepGraphs::begin_scratch() {
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}
bool StepGraphs::end_scratch() {
  cudaGraph_t scratch = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream_, &scratch);
  size_t stray = 0;
  if (err == cudaSuccess && scratch != nullptr) err = cudaGraphGetNodes(scratch, nullptr, &stray);
  if (scratch != nullptr) cudaGraphDestroy(scratch);
  if (err == cudaSuccess && stray == 0) return true;
  (void)cudaGetLastError();
  spdlog::warn("CUDA graph replay: {} stream operation(s) bypassed the replay check ({}); recording the step again",
               stray, cudaGetErrorString(err));
  return false;
}

// The recording's segment so far becomes a graph, launched at once.
void StepGraphs::close_segment() {
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  Segment segment;
  segment.tape_end = current_->tape.size();
  // Captured kernels carry their stream's priority; a graph runs them at it only when asked.
  if (err == cudaSuccess)
    err = cudaGraphInstantiate(&segment.exec, graph, stream_priorities() ? cudaGraphInstantiateFlagUseNodePriority : 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (err != cudaSuccess) throw CaptureFailed{err};
  current_->segments.push_back(segment);
  launch(segment);
}

void StepGraphs::boundary() {
  if (!active_) return;
  ++boundaries_;
  // Segments end after 1, 2, 4, 8, ... boundaries (the model marks two a layer): the GPU starts once
  // the first attention is checked, and each later segment's check runs while the GPU works through
  // the one before, which is half as long and takes far longer to run than to check. A segment
  // boundary costs a graph launch and the PDL overlap across it.
  if ((boundaries_ & (boundaries_ - 1)) != 0) return;
  Graph& g = *current_;
  if (!checking_) {
    close_segment();
    const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) throw CaptureFailed{err};
    return;
  }
  if (diverged_) return;
  // The last segment is launched when the step ends, not here.
  if (launched_ + 1 >= g.segments.size() || !g.tape.matches_so_far(g.segments[launched_].tape_end)) {
    diverged_ = true;
    return;
  }
  const bool clean = end_scratch();
  if (clean) launch(g.segments[launched_]);
  diverged_ = !clean;
  begin_scratch();
}

core::Tensor StepGraphs::run(int64_t key, const std::function<core::Tensor()>& step) {
  Graph& g = graphs_[key];
  if (g.never || !g.warmed) {
    g.warmed = true;
    ++stats_.eager;
    return step();
  }
  // The last graph's copies read the staging memory that this step rewrites.
  TESSERA_CUDA_CHECK(cudaEventSynchronize(done_));
  if (!g.segments.empty()) {
    core::Tensor out;
    if (replay(g, step, out)) return out;
    ++stats_.stale;
    // Segments already launched did part of this step; recording runs all of it again, which writes
    // the same values. Their staged copies must be done before staging is rewritten.
    if (launched_ > 0) TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return record(g, step);
}

bool StepGraphs::replay(Graph& g, const std::function<core::Tensor()>& step, core::Tensor& out) {
  begin(g, true);
  begin_scratch();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    out = step();
  } catch (...) {
    cudaGraph_t scratch = nullptr;
    (void)cudaStreamEndCapture(stream_, &scratch);
    if (scratch != nullptr) cudaGraphDestroy(scratch);
    (void)cudaGetLastError();
    const bool partial = launched_ > 0;
    end();
    // Part of the step may be queued: let it finish before the caller goes on.
    if (partial) (void)cudaStreamSynchronize(stream_);
    throw;
  }
  end();
  stats_.replay_host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool clean = end_scratch();
  if (!clean || diverged_ || !g.tape.matched() || launched_ + 1 != g.segments.size()) return false;
  launch(g.segments.back());
  TESSERA_CUDA_CHECK(cudaEventRecord(done_, stream_));
  ++stats_.replayed;
  return true;
}

core::Tensor StepGraphs::record(Graph& g, const std::function<core::Tensor()>& step) {
  drop_segments(g);
  begin(g, false);
  core::Tensor out;
  try {
    TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    out = step();
    close_segment();
  } catch (const CaptureFailed& f) {
    abandon_recording(g);
    spdlog::warn("CUDA graph: capturing a decode step failed ({}); steps of its size run without a graph",
                 cudaGetErrorString(f.error));
    return run_without_graph(g, step);
  } catch (...) {
    // A failure of the step itself (a refused argument) is the caller's; one that broke the capture
    // (a read-back to the host, a synchronous copy) means steps of this key run without a graph.
    if (!abandon_recording(g)) throw;
    spdlog::warn("CUDA graph: a decode step cannot be captured; steps of its size run without a graph");
    return run_without_graph(g, step);
  }
  end();
  TESSERA_CUDA_CHECK(cudaEventRecord(done_, stream_));
  ++stats_.recorded;
  return out;
}

bool StepGraphs::abandon_recording(Graph& g) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  (void)cudaStreamIsCapturing(stream_, &status);
  cudaGraph_t graph = nullptr;
  if (status != cudaStreamCaptureStatusNone) (void)cudaStreamEndCapture(stream_, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  end();
  drop_segments(g);
  // Segments may have been launched: they finish before anything is staged again.
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return status == cudaStreamCaptureStatusInvalidated;
}

core::Tensor StepGraphs::run_without_graph(Graph& g, const std::function<core::Tensor()>& step) {
  g.never = true;
  ++stats_.eager;
  return step();
}

}  // namespace tessera::ops::cuda
