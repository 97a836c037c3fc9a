// One-shot collectives over peer memory: the protocol is in peer.h.
#include "ops/cuda/kernels/comm/peer.h"
#include "ops/cuda/kernels/common/bounded_wait.cuh"
#include "ops/cuda/kernels/common/float4_access.h"
#include "ops/cuda/runtime/cuda_check.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {

namespace {

__device__ __forceinline__ void store_release_system(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_system(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Columns [first, first + count) of `rank` when `total` are split over `size` ranks, as
// ops::balanced_cols splits them.
__device__ __forceinline__ void balanced(int64_t total, int size, int rank, int64_t& first, int64_t& count) {
  const int64_t base = total / size, extra = total % size;
  first = rank * base + (rank < extra ? rank : extra);
  count = base + (rank < extra ? 1 : 0);
}

// This block's call number, read by thread 0 from its counter (no other block touches it).
__device__ __forceinline__ uint32_t next_call(const PeerArgs& a) {
  __shared__ uint32_t call;
  if (threadIdx.x == 0) call = a.signals[a.rank]->calls[blockIdx.x] + 1;
  __syncthreads();
  return call;
}

// Slot `from` of half call % 2 of rank q's buffer.
__device__ __forceinline__ float* slot(const PeerArgs& a, int q, int from, uint32_t call) {
  return a.buffers[q] + (static_cast<int64_t>(call & 1u) * a.size + from) * a.half_floats;
}

// The barrier of block b for `call` (peer.h). False when it stopped waiting (timeout or abort): the
// block then writes nothing.
__device__ bool arrive_and_wait(const PeerArgs& a, uint32_t call) {
  __shared__ int stopped;
  if (threadIdx.x == 0) stopped = 0;
  __syncthreads();  // the block's published data, and `stopped`, before any flag
  const int q = threadIdx.x;
  if (q < a.size) {
    __threadfence_system();
    store_release_system(&a.signals[q]->arrived[blockIdx.x][a.rank], call);
    const uint32_t* flag = &a.signals[a.rank]->arrived[blockIdx.x][q];
    const uint64_t start = global_ns();
    for (uint32_t spins = 1;; ++spins) {
      // Counters wrap: a flag at or past this call (a peer can be one call ahead) ends the wait.
      if (static_cast<int32_t>(load_acquire_system(flag) - call) >= 0) break;
      // The host flag and the clock every 1024 spins: a read of host memory costs a PCIe round trip.
      if ((spins & 1023u) == 0) {
        const int why = *a.abort_flag                        ? kPeerStatusAborted
                        : global_ns() - start > a.timeout_ns ? kPeerStatusTimedOut
                                                             : 0;
        if (why) {
          // A plain store: atomics on host memory depend on the platform's PCIe; any non-zero word
          // says the same.
          *reinterpret_cast<volatile int*>(a.status) = why;
          stopped = 1;
          break;
        }
      }
    }
  }
  __syncthreads();
  return stopped == 0;
}

// The end of block b's call: its counter moves on (read again by block b of the next call, which
// the stream orders after this kernel).
__device__ __forceinline__ void finish_call(const PeerArgs& a, uint32_t call) {
  if (threadIdx.x == 0) a.signals[a.rank]->calls[blockIdx.x] = call;
}

// Grid-stride loops over n elements: block b's share is the same on every rank (the group's grid).
#define PEER_FOR(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The slots are read past L1 (__ldcg): other GPUs, or other ranks' kernels on this one, wrote them,
// and L1 is not coherent.
__global__ void __launch_bounds__(kPeerThreads) peer_all_reduce_vec4_kernel(PeerArgs a, float4* x, int64_t n4) {
  const uint32_t call = next_call(a);
  PEER_FOR(i, n4) {
    const float4 v = x[i];
    for (int q = 0; q < a.size; ++q) reinterpret_cast<float4*>(slot(a, q, a.rank, call))[i] = v;
  }
  if (arrive_and_wait(a, call)) {
    PEER_FOR(i, n4) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int q = 0; q < a.size; ++q) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(slot(a, a.rank, q, call)) + i);
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      x[i] = sum;
    }
  }
  finish_call(a, call);
}

// Unaligned or n % 4 != 0: the same ownership as the float4 kernel (block b owns groups of four
// elements, group g at grid-stride position g), element by element, so that every rank's blocks own
// the same elements whichever kernel its x's address chose.
__global__ void __launch_bounds__(kPeerThreads) peer_all_reduce_kernel(PeerArgs a, float* x, int64_t n) {
  const uint32_t call = next_call(a);
  const int64_t groups = (n + 3) / 4;
  PEER_FOR(g, groups)
  for (int64_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) {
    const float v = x[i];
    for (int q = 0; q < a.size; ++q) slot(a, q, a.rank, call)[i] = v;
  }
  if (arrive_and_wait(a, call)) {
    PEER_FOR(g, groups)
    for (int64_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) {
      float sum = 0.0f;
      for (int q = 0; q < a.size; ++q) sum += __ldcg(slot(a, a.rank, q, call) + i);
      x[i] = sum;
    }
  }
  finish_call(a, call);
}

// Rank q's part [rows, count_q] arrives in slot q of every rank; block b reads element i of slot q
// only where block b of rank q wrote it (the same share of q's part, not of the output).
__global__ void __launch_bounds__(kPeerThreads)
    peer_all_gather_kernel(PeerArgs a, const float* part, int64_t rows, int64_t total, float* out) {
  const uint32_t call = next_call(a);
  int64_t first, count;
  balanced(total, a.size, a.rank, first, count);
  PEER_FOR(i, rows * count) {
    const float v = part[i];
    for (int q = 0; q < a.size; ++q) slot(a, q, a.rank, call)[i] = v;
  }
  if (arrive_and_wait(a, call)) {
    for (int q = 0; q < a.size; ++q) {
      balanced(total, a.size, q, first, count);
      const float* theirs = slot(a, a.rank, q, call);
      PEER_FOR(i, rows * count) out[(i / count) * total + first + i % count] = __ldcg(theirs + i);
    }
  }
  finish_call(a, call);
}

// Element i = (t, c) of x goes only to the rank that owns column c, into this rank's slot at the
// same index; every rank then sums its own columns over the slots.
__global__ void __launch_bounds__(kPeerThreads)
    peer_reduce_scatter_kernel(PeerArgs a, const float* x, int64_t rows, int64_t total, float* out) {
  const uint32_t call = next_call(a);
  const int64_t base = total / a.size, extra = total % a.size;
  PEER_FOR(i, rows * total) {
    const int64_t c = i % total;
    // The owner of column c in the balanced split: the first `extra` ranks hold base + 1 columns.
    const int64_t wide = extra * (base + 1);
    const int owner = static_cast<int>(c < wide ? c / (base + 1) : extra + (c - wide) / base);
    slot(a, owner, a.rank, call)[i] = x[i];
  }
  if (arrive_and_wait(a, call)) {
    int64_t first, count;
    balanced(total, a.size, a.rank, first, count);
    PEER_FOR(i, rows * total) {
      const int64_t c = i % total - first;
      if (c < 0 || c >= count) continue;
      float sum = 0.0f;
      for (int q = 0; q < a.size; ++q) sum += __ldcg(slot(a, a.rank, q, call) + i);
      out[(i / total) * count + c] = sum;
    }
  }
  finish_call(a, call);
}

#undef PEER_FOR

}  // namespace

void launch_peer_all_reduce(const PeerArgs& a, float* x, int64_t n, cudaStream_t s) {
  // The buffers' halves are 16-byte aligned (half_floats % 4 == 0, PeerGroup).
  if (float4_access(n, {x}))
    launch_plain(peer_all_reduce_vec4_kernel, a.blocks, kPeerThreads, 0, s, a, reinterpret_cast<float4*>(x), n / 4);
  else
    launch_plain(peer_all_reduce_kernel, a.blocks, kPeerThreads, 0, s, a, x, n);
}

void launch_peer_all_gather_cols(const PeerArgs& a, const float* part, int64_t rows, int64_t total, float* out,
                                 cudaStream_t s) {
  launch_plain(peer_all_gather_kernel, a.blocks, kPeerThreads, 0, s, a, part, rows, total, out);
}

void launch_peer_reduce_scatter_cols(const PeerArgs& a, const float* x, int64_t rows, int64_t total, float* out,
                                     cudaStream_t s) {
  launch_plain(peer_reduce_scatter_kernel, a.blocks, kPeerThreads, 0, s, a, x, rows, total, out);
}

void preload_peer_kernels() {
  cudaFuncAttributes attributes{};
  for (const void* k :
       {reinterpret_cast<const void*>(peer_all_reduce_vec4_kernel),
        reinterpret_cast<const void*>(peer_all_reduce_kernel), reinterpret_cast<const void*>(peer_all_gather_kernel),
        reinterpret_cast<const void*>(peer_reduce_scatter_kernel)})
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, k));
}

}  // namespace tessera::ops::cuda
