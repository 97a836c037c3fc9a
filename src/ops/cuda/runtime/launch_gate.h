// Replay checking for decode steps recorded as CUDA graphs (step_graph.h).
//
// A graph bakes in everything a launch hands the driver: the kernel, its grid, its arguments (device
// addresses, sizes, split counts). Replaying one is only right if the step would launch exactly that
// again. So while a step is recorded, every stream operation of the backend (kernel launches,
// copies, memsets, event records and waits, cuBLASLt calls) passes through admit() with a signature
// of what it hands the driver, and the tape keeps the signatures in order. A replay runs the step's
// host code again (the model, the ops' checks, the uploads of this step's token ids, positions and
// block tables into the graph's staging memory) with every operation held back, and only compares
// each signature with the recorded one. Any difference (a host value the graph baked in changed)
// makes the graph stale, and the step is recorded again instead of replayed.
//
// Host-only: no CUDA headers, so the backend's plain C++ files use it too (C++17: nvcc compiles it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace tessera::ops::cuda {

// FNV-1a over the values of an operation's parameters.
class Signature {
 public:
  void add_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 1099511628211ull;
  }
  // Scalars and pointers only: a struct's padding bytes are not data, so a struct argument lists its
  // fields through an add_fields overload (kernels.h) instead.
  template <class T>
  void add(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T> || std::is_null_pointer_v<T>,
                  "a struct: list its fields");
    add_bytes(&v, sizeof v);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

// The signatures of one recorded step, in issue order.
class StepTape {
 public:
  // Recording: every operation is issued and its signature appended. Checking: operations are held
  // back and compared with the recording.
  void start_recording() {
    sigs_.clear();
    checking_ = false;
    diverged_ = false;
  }
  void start_checking() {
    next_ = 0;
    checking_ = true;
    diverged_ = false;
  }
  // True when the operation is to be issued.
  bool admit(uint64_t signature) {
    if (!checking_) {
      sigs_.push_back(signature);
      return true;
    }
    if (next_ >= sigs_.size() || sigs_[next_] != signature) diverged_ = true;
    ++next_;
    return false;
  }
  // After checking: the step asked for exactly the recorded operations.
  bool matched() const { return !diverged_ && next_ == sigs_.size(); }
  // While checking: the first `count` operations were asked for, each the recorded one.
  bool matches_so_far(size_t count) const { return !diverged_ && next_ == count; }
  size_t size() const { return sigs_.size(); }

 private:
  std::vector<uint64_t> sigs_;
  size_t next_ = 0;
  bool checking_ = false, diverged_ = false;
};

// The tape of the step being recorded or checked on this thread; nullptr when operations are
// issued as usual.
StepTape*& active_tape();

// True when an operation is to be issued; `sign` fills its signature, and is only called while a
// tape is active (eager steps pay one thread-local read).
template <class SignFn>
bool admit(SignFn&& sign) {
  StepTape* tape = active_tape();
  if (tape == nullptr) return true;
  Signature s;
  sign(s);
  return tape->admit(s.value());
}

}  // namespace tessera::ops::cuda
