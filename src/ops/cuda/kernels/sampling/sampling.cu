// Ops::sample on the GPU: each row is read from global memory a few times (argmax, then per
// selection four radix passes, then the draw), no sort and no scratch memory. The arithmetic is
// sampling_rule.h's, so the tokens equal the CPU reference's.
//
// A row is one cluster of `blocks_per_row` blocks of 1024 threads (sm_90+; one block elsewhere):
// every pass is a reduction over the row, and one block (one SM) kept only ~16 KB of loads in
// flight: at batch 1 the 163840-token row took 155 us of a 1.85 ms decode step on the H200
// (docs/PERFORMANCE.md). Each block reduces its slice; the blocks combine their partials through
// distributed shared memory, each block redundantly, so that every block takes the same decisions
// without another round trip. Integer sums, so the order of combination does not matter.
#include <cooperative_groups.h>

#include "ops/cuda/kernels/sampling/sampling.h"
#include "ops/cuda/kernels/common/float4_access.h"
#include "ops/cuda/runtime/launch.cuh"

namespace tessera::ops::cuda {
namespace {

using namespace sampling;
using u64 = unsigned long long;  // the type CUDA's atomics and shuffles take

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// Fewer passes (TESSERA_SAMPLE_FEWER_PASSES=1): a radix selection's third and fourth passes read the
// tokens of the first pass's bin from shared memory instead of the row, when there are at most this
// many in the row.
constexpr uint32_t kMaxCandidates = 8192;

struct Shared {
  uint32_t count[256];      // radix histogram of this block's slice: tokens per digit
  u64 mass[256];            // and their mass
  uint32_t row_count[256];  // the histogram of the whole row (every block's summed)
  u64 row_mass[256];
  u64 reduce[kWarps];
  u64 block_value;                           // this block's partial of a reduction, for the cluster
  uint32_t digit, digit_count, above_count;  // the digit picked by a radix pass
  u64 above_mass;
  uint32_t seg_ties[kWarps];  // the draw: per warp segment, tokens tied with the cut
  u64 seg_above[kWarps];      // and mass of the tokens above the cut
  int hit_seg;                // this block's warp whose segment holds the draw; -1: another block's
  uint32_t hit_ties_before;
  u64 hit_mass_before;
  double threshold;                     // top-p's, when the first radix pass's histogram gave it
  uint32_t num_candidates;              // fewer passes: the order keys of this block's slice in the first
  uint32_t candidates[kMaxCandidates];  // pass's bin (their logits and masses follow from the key)
};

// The blocks of one row: a cluster on sm_90+ (rank = blockIdx.y), one block elsewhere.
struct Blocks {
  int rank, count;
  // Every thread of every block of the row: the memory operations before are visible after
  // (shared memory of the other blocks included). A plain block barrier when there is one block.
  __device__ void sync() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (count > 1) {
      cooperative_groups::this_cluster().sync();
      return;
    }
#endif
    __syncthreads();
  }
  // Block `r`'s copy of this block's shared object `v` (distributed shared memory).
  template <class T>
  __device__ const T& at(const T& v, int r) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (count > 1) return *cooperative_groups::this_cluster().map_shared_rank(&v, static_cast<unsigned>(r));
#endif
    (void)r;
    return v;
  }
};

struct Row {
  const float* x;
  int n;
  float inv_t;
  float s_max;
  bool vec;    // n % 4 == 0 and x 16-byte aligned: loads of four floats
  int lo, hi;  // this block's slice [lo, hi) (lo a multiple of 4)
};

// The kept set: tokens with key > key, and of those with key == key the first `ties` by id.
struct Cut {
  uint32_t key = 0;  // 0 is below every token: all kept
  int64_t ties = 0;
  u64 mass = 0;  // mass of the kept set
};

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ float s_at(const Row& row, int i) { return scaled_logit(__ldg(row.x + i), row.inv_t); }

// f(i, s, in) for every token i of [lo, hi) with its scaled logit s, four consecutive ids a thread
// where the row allows float4 loads. Every thread of the block runs the same iterations (`in` false
// past hi: s is then -inf), since the histogram's warp-wide sums need whole warps.
template <class F>
__device__ __forceinline__ void for_each_token(const Row& row, int lo, int hi, F&& f) {
  if (row.vec) {
    for (int base = lo; base < hi; base += 4 * kThreads) {
      const int i = base + 4 * static_cast<int>(threadIdx.x);
      float4 v = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      if (i < hi) v = __ldg(reinterpret_cast<const float4*>(row.x + i));  // hi - i is a multiple of 4
      f(i, scaled_logit(v.x, row.inv_t), i < hi);
      f(i + 1, scaled_logit(v.y, row.inv_t), i < hi);
      f(i + 2, scaled_logit(v.z, row.inv_t), i < hi);
      f(i + 3, scaled_logit(v.w, row.inv_t), i < hi);
    }
  } else {
    for (int base = lo; base < hi; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      f(i, i < hi ? s_at(row, i) : -INFINITY, i < hi);
    }
  }
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_inclusive_sum(T v) {
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(kFull, v, o);
    if (lane_id() >= o) v += up;
  }
  return v;
}

// Sum or max over every block of the row; every thread gets the result. Integers, so the order
// does not matter.
template <bool kMax>
__device__ u64 row_reduce(u64 v, Shared& sh, const Blocks& blocks) {
  auto op = [](u64 a, u64 b) { return kMax ? max(a, b) : a + b; };
  auto warp_reduce = [&](u64 x) {
    for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(kFull, x, o));
    return x;
  };
  v = warp_reduce(v);
  if (lane_id() == 0) sh.reduce[warp_id()] = v;
  __syncthreads();
  v = warp_reduce(sh.reduce[lane_id()]);  // kWarps == 32: each warp reduces all partials
  if (blocks.count > 1) {
    if (threadIdx.x == 0) sh.block_value = v;
    blocks.sync();
    v = 0;
    for (int r = 0; r < blocks.count; ++r) v = op(v, blocks.at(sh.block_value, r));
  }
  blocks.sync();  // sh.reduce and sh.block_value are free again (in every block)
  return v;
}

__device__ u64 total_mass(const Row& row, Shared& sh, const Blocks& blocks) {
  u64 m = 0;
  for_each_token(row, row.lo, row.hi, [&](int, float s, bool in) {
    if (in) m += token_mass(s, row.s_max);
  });
  return row_reduce<false>(m, sh, blocks);
}

// Adds one token (count 1, mass q) to bin `digit` (256: none). Lanes of a warp with the same digit
// are summed first, one shared atomic per bin and warp: most tokens share the top digits, so
// per-token atomics would serialise. q <= 2^40, so 32 of its 21-bit halves fit 32 bits.
__device__ __forceinline__ void histogram_add(uint32_t digit, u64 q, Shared& sh) {
  const unsigned peers = __match_any_sync(kFull, digit);
  const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(q & 0x1FFFFFu));
  const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(q >> 21));
  if (digit < 256 && lane_id() == __ffs(peers) - 1) {
    atomicAdd(&sh.count[digit], static_cast<unsigned>(__popc(peers)));
    const u64 sum = (static_cast<u64>(hi) << 21) + lo;
    if (sum) atomicAdd(&sh.mass[digit], sum);
  }
}

// Warp 0: walking the bins of the row's histogram from the top, the first where the running count
// reaches `need` (by count) or the running mass, after `mass_before`, reaches the top-p threshold
// (by mass); and what lies in the bins above it. The lowest bin is taken if none qualifies (it
// cannot happen: the selection only ever descends into a bin that reaches).
__device__ void pick_digit(bool by_mass, int64_t need, u64 mass_before, double threshold, Shared& sh) {
  const int lane = lane_id();
  uint32_t c[8], csum = 0;
  u64 m[8], msum = 0;
  for (int j = 0; j < 8; ++j) {  // lane 0 holds the highest bins
    const int d = 255 - 8 * lane - j;
    c[j] = sh.row_count[d];
    m[j] = sh.row_mass[d];
    csum += c[j];
    msum += m[j];
  }
  uint32_t cnt = warp_inclusive_sum(csum) - csum;
  u64 ms = warp_inclusive_sum(msum) - msum;
  int hit = -1;
  uint32_t hit_count = 0, hit_above_count = 0;
  u64 hit_above_mass = 0;
  for (int j = 0; j < 8 && hit < 0; ++j) {
    const bool reached =
        by_mass ? reaches_top_p(mass_before + ms + m[j], threshold) : static_cast<int64_t>(cnt + c[j]) >= need;
    if (reached || (lane == 31 && j == 7)) {
      hit = j;
      hit_count = c[j];
      hit_above_count = cnt;
      hit_above_mass = ms;
    }
    cnt += c[j];
    ms += m[j];
  }
  const unsigned lanes = __ballot_sync(kFull, hit >= 0);
  if (lane == __ffs(lanes) - 1) {
    sh.digit = static_cast<uint32_t>(255 - 8 * lane - hit);
    sh.digit_count = hit_count;
    sh.above_count = hit_above_count;
    sh.above_mass = hit_above_mass;
  }
}

// Appends the order key of every lane with `match` to this block's candidates (whole warps call it;
// the caller guarantees the room).
__device__ __forceinline__ void append_candidate(bool match, uint32_t key, Shared& sh) {
  const unsigned lanes = __ballot_sync(kFull, match);
  if (lanes == 0) return;
  const int leader = __ffs(lanes) - 1;
  uint32_t base = 0;
  if (lane_id() == leader) base = atomicAdd(&sh.num_candidates, static_cast<uint32_t>(__popc(lanes)));
  base = __shfl_sync(kFull, base, leader);
  if (match) sh.candidates[base + __popc(lanes & ((1u << lane_id()) - 1u))] = key;
}

// The kept prefix of the (s descending, id ascending) order: the first `k` tokens (by count), or
// the shortest prefix whose mass reaches `threshold` (by mass). Radix selection over the order
// key, 8 bits a pass from the top; each pass histograms the tokens that match the digits found.
// `top_p_of_total` > 0 (by mass): the threshold is top_p_threshold(top_p_of_total, the row's total
// mass), summed from the first pass's histogram, where every token matches the empty prefix (a pass
// fewer than total_mass first). `fewer_passes`: the second pass also keeps the keys of the tokens it
// reads in the first pass's bin, where that bin holds at most kMaxCandidates, and the last two
// passes histogram those from shared memory instead of reading the row again.
__device__ Cut select_prefix(const Row& row, bool by_mass, int64_t k, double threshold, float top_p_of_total,
                             bool fewer_passes, Shared& sh, const Blocks& blocks) {
  uint32_t prefix = 0, mask = 0, digit_count = 0;
  int64_t need = k;
  u64 above_mass = 0;
  bool from_candidates = false;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const bool collect = fewer_passes && shift == 16 && digit_count <= kMaxCandidates;
    // The other blocks have read this block's histogram of the pass before (the sync after the pick).
    for (int j = threadIdx.x; j < 256; j += kThreads) {
      sh.count[j] = 0;
      sh.mass[j] = 0;
    }
    if (collect && threadIdx.x == 0) sh.num_candidates = 0;
    __syncthreads();
    auto add = [&](float s, bool in) {
      uint32_t digit = 256;
      u64 q = 0;
      const uint32_t key = order_key(s);
      const bool match = in && (key & mask) == prefix;
      if (match) {
        digit = (key >> shift) & 255u;
        q = token_mass(s, row.s_max);
      }
      if (collect) append_candidate(match, key, sh);
      histogram_add(digit, q, sh);
    };
    if (from_candidates) {
      const int n = static_cast<int>(sh.num_candidates);
      for (int base = 0; base < n; base += kThreads) {  // the same trip count in every warp
        const int i = base + static_cast<int>(threadIdx.x);
        add(i < n ? key_value(sh.candidates[i]) : -INFINITY, i < n);
      }
    } else {
      for_each_token(row, row.lo, row.hi, [&](int, float s, bool in) { add(s, in); });
    }
    blocks.sync();            // every block's histogram complete
    if (threadIdx.x < 256) {  // the row's histogram: this block's bin, plus the other blocks'
      uint32_t c = 0;
      u64 m = 0;
      for (int r = 0; r < blocks.count; ++r) {
        const Shared& other = blocks.at(sh, r);
        c += other.count[threadIdx.x];
        m += other.mass[threadIdx.x];
      }
      sh.row_count[threadIdx.x] = c;
      sh.row_mass[threadIdx.x] = m;
    }
    __syncthreads();
    if (warp_id() == 0) {
      if (shift == 24 && top_p_of_total > 0.0f) {  // every token is in this histogram
        u64 total = 0;
        for (int j = 0; j < 8; ++j) total += sh.row_mass[8 * lane_id() + j];
        threshold = top_p_threshold(top_p_of_total, warp_sum(total));
        if (lane_id() == 0) sh.threshold = threshold;
      }
      pick_digit(by_mass, need, above_mass, threshold, sh);
    }
    blocks.sync();  // the digit known; every block's histogram read by the others
    if (shift == 24 && top_p_of_total > 0.0f) threshold = sh.threshold;
    need -= sh.above_count;
    above_mass += sh.above_mass;
    digit_count = sh.digit_count;
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
    from_candidates = from_candidates || collect;
  }
  Cut cut;
  cut.key = prefix;
  const u64 q = token_mass(key_value(prefix), row.s_max);  // every tie weighs the same
  if (by_mass) {
    // The fewest ties j in [1, digit_count] with reaches(above + j·q) (monotone in j).
    int64_t lo = 1, hi = digit_count;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (reaches_top_p(above_mass + static_cast<u64>(mid) * q, threshold))
        hi = mid;
      else
        lo = mid + 1;
    }
    cut.ties = lo;
  } else {
    cut.ties = need;
  }
  cut.mass = above_mass + static_cast<u64>(cut.ties) * q;
  return cut;
}

// The kept token whose cumulative mass in id order first exceeds `target`. The row's ids are cut
// into one contiguous segment per warp of every block (a multiple of 4 long): each warp totals its
// segment, warp 0 of every block walks all the segments' totals to the one that holds the target,
// and that segment's warp scans it 32 ids at a time.
__device__ void draw(const Row& row, const Cut& cut, u64 target, int32_t fallback, Shared& sh, const Blocks& blocks,
                     int32_t* id_out, float* logprob_out) {
  const int lane = lane_id(), warp = warp_id();
  const int segments = kWarps * blocks.count;
  const int seg = ((row.n + segments - 1) / segments + 3) / 4 * 4;
  const int g = blocks.rank * kWarps + warp;
  const int lo = min(row.n, g * seg), hi = min(row.n, lo + seg);
  const u64 cut_q = token_mass(key_value(cut.key), row.s_max);
  uint32_t ties = 0;
  u64 above = 0;
  auto tally = [&](float s) {
    const uint32_t key = order_key(s);
    if (key > cut.key)
      above += token_mass(s, row.s_max);
    else if (key == cut.key)
      ++ties;
  };
  if (row.vec) {
    for (int i = lo + 4 * lane; i < hi; i += 128) {  // hi - lo is a multiple of 4 here
      const float4 v = __ldg(reinterpret_cast<const float4*>(row.x + i));
      tally(scaled_logit(v.x, row.inv_t));
      tally(scaled_logit(v.y, row.inv_t));
      tally(scaled_logit(v.z, row.inv_t));
      tally(scaled_logit(v.w, row.inv_t));
    }
  } else {
    for (int i = lo + lane; i < hi; i += 32) tally(s_at(row, i));
  }
  ties = warp_sum(ties);
  above = warp_sum(above);
  if (lane == 0) {
    sh.seg_ties[warp] = ties;
    sh.seg_above[warp] = above;
  }
  blocks.sync();
  if (warp == 0) {
    // The segments in id order: block 0's 32, then block 1's, ... (lane = warp within a block).
    uint32_t t_carry = 0;
    u64 m_carry = 0;
    int hit_block = -1, hit_lane = -1;
    uint32_t hit_t_before = 0;
    u64 hit_m_before = 0;
    for (int r = 0; r < blocks.count && hit_block < 0; ++r) {
      const Shared& other = blocks.at(sh, r);
      const uint32_t t = other.seg_ties[lane];
      const uint32_t t_before = t_carry + warp_inclusive_sum(t) - t;
      const int64_t left = cut.ties - static_cast<int64_t>(t_before);  // ties still to keep
      const int64_t kept_ties = left <= 0 ? 0 : left < t ? left : t;
      const u64 m = other.seg_above[lane] + static_cast<u64>(kept_ties) * cut_q;
      const u64 m_incl = m_carry + warp_inclusive_sum(m);
      const unsigned hit = __ballot_sync(kFull, m_incl > target);
      if (hit) {
        hit_block = r;
        hit_lane = __ffs(hit) - 1;
        hit_t_before = __shfl_sync(kFull, t_before, hit_lane);
        hit_m_before = __shfl_sync(kFull, m_incl - m, hit_lane);
      }
      t_carry = __shfl_sync(kFull, t_before + t, 31);
      m_carry = __shfl_sync(kFull, m_incl, 31);
    }
    if (lane == 0) {
      sh.hit_seg = hit_block == blocks.rank ? hit_lane : -1;
      sh.hit_ties_before = hit_t_before;
      sh.hit_mass_before = hit_m_before;
      if (hit_block < 0 && blocks.rank == 0) {  // rounding left no token (it cannot): the argmax
        *id_out = fallback;
        if (logprob_out) *logprob_out = 0.0f;
      }
    }
  }
  // Every block has read the others' segment totals (they may exit after this), and sh.hit_* is set.
  blocks.sync();
  if (warp != sh.hit_seg) return;
  uint32_t ties_before = sh.hit_ties_before;
  u64 mass_before = sh.hit_mass_before;
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    float s = 0.0f;
    uint32_t key = 0;
    u64 q = 0;
    if (i < hi) {
      s = s_at(row, i);
      key = order_key(s);
      q = token_mass(s, row.s_max);
    }
    const bool is_tie = i < hi && key == cut.key;
    const unsigned tie_lanes = __ballot_sync(kFull, is_tie);
    const uint32_t rank = ties_before + __popc(tie_lanes & ((1u << lane) - 1u));
    const bool kept = i < hi && (key > cut.key || (is_tie && rank < cut.ties));
    const u64 incl = warp_inclusive_sum(kept ? q : u64{0});
    const unsigned found = __ballot_sync(kFull, kept && mass_before + incl > target);
    if (found) {
      if (lane == __ffs(found) - 1) {
        *id_out = i;
        if (logprob_out) *logprob_out = kept_logprob(log_weight(s, row.s_max), cut.mass);
      }
      return;
    }
    mass_before += __shfl_sync(kFull, incl, 31);
    ties_before += __popc(tie_lanes);
  }
}

// Grid (rows, blocks_per_row), clusters of blocks_per_row blocks along y where that is > 1.
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t vocab, const SampleRow* params,
                                                          int32_t* ids, float* logprobs, bool vec, bool fewer_passes) {
  __shared__ Shared sh;
  const Blocks blocks{static_cast<int>(blockIdx.y), static_cast<int>(gridDim.y)};
  const int64_t r = blockIdx.x;
  const SampleRow p = params[r];
  const bool greedy = p.temperature == 0.0f;
  const int n = static_cast<int>(vocab);
  const int slice = ((n + blocks.count - 1) / blocks.count + 3) / 4 * 4;
  const int lo = min(n, blocks.rank * slice);
  Row row{logits + r * vocab, n, greedy ? 1.0f : f_recip(p.temperature), 0.0f, vec, lo, min(n, lo + slice)};
  float* logprob = logprobs ? logprobs + r : nullptr;
  const bool writer = blocks.rank == 0 && threadIdx.x == 0;

  // The first argmax: the largest (key, inverted id) as one integer (0 for no token: below all).
  u64 best = 0;
  for_each_token(row, row.lo, row.hi, [&](int i, float s, bool in) {
    if (in) best = max(best, static_cast<u64>(order_key(s)) << 32 | (0xFFFFFFFFu - static_cast<uint32_t>(i)));
  });
  best = row_reduce<true>(best, sh, blocks);
  const auto argmax = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(best));
  row.s_max = key_value(static_cast<uint32_t>(best >> 32));

  if (row.s_max == -INFINITY || greedy) {
    // Greedy logprob: log-softmax at temperature 1 over every token (argmax has log weight 0).
    const bool any = row.s_max != -INFINITY;
    const u64 total = logprob && any ? total_mass(row, sh, blocks) : 0;
    if (writer) {
      ids[r] = argmax;  // 0 when every logit is -inf
      if (logprob) *logprob = any ? kept_logprob(0.0f, total) : -INFINITY;
    }
    return;
  }

  const int64_t k = p.top_k > 0 && p.top_k < row.n ? p.top_k : row.n;
  // Top-p over the whole row: its threshold from the radix selection's first histogram.
  const bool total_in_select = fewer_passes && k == row.n && p.top_p < 1.0f;
  Cut cut;
  if (k < row.n)
    cut = select_prefix(row, false, k, 0.0, 0.0f, fewer_passes, sh, blocks);
  else if (!total_in_select)
    cut.mass = total_mass(row, sh, blocks);
  if (p.top_p < 1.0f)
    cut = total_in_select
              ? select_prefix(row, true, 0, 0.0, p.top_p, true, sh, blocks)
              : select_prefix(row, true, 0, top_p_threshold(p.top_p, cut.mass), 0.0f, fewer_passes, sh, blocks);
  draw(row, cut, draw_target(p.uniform, cut.mass), argmax, sh, blocks, ids + r, logprob);
}

__global__ void mask_logits_kernel(float* logits, int64_t vocab, const uint32_t* bitmask) {
  const int64_t row = blockIdx.y, t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= vocab) return;
  const uint32_t word = bitmask[row * ((vocab + 31) / 32) + t / 32];
  if (!((word >> (t % 32)) & 1u)) logits[row * vocab + t] = -INFINITY;
}

}  // namespace

void launch_mask_logits(float* logits, int64_t rows, int64_t vocab, const uint32_t* bitmask, cudaStream_t s) {
  if (rows == 0 || vocab == 0) return;
  constexpr int kMaskThreads = 256;
  const dim3 grid(static_cast<unsigned>((vocab + kMaskThreads - 1) / kMaskThreads), static_cast<unsigned>(rows));
  launch_plain(mask_logits_kernel, grid, kMaskThreads, 0, s, logits, vocab, bitmask);
}

int sample_blocks_per_row(int64_t rows, int sm, int num_sms) {
  if (sm < 90 || rows <= 0) return 1;  // clusters are sm_90+
  int blocks = 8;                      // the portable cluster size
  while (blocks > 1 && rows * blocks > num_sms) blocks /= 2;
  return blocks;
}

void launch_sample(const float* logits, int64_t rows, int64_t vocab, const SampleRow* params, int32_t* ids,
                   float* logprobs, int blocks_per_row, bool fewer_passes, cudaStream_t s) {
  if (rows == 0) return;
  const auto per_row = static_cast<unsigned>(blocks_per_row);
  const bool vec = float4_access(vocab, {logits});
  // Not a dependent launch: a row's 1024-thread blocks, waiting on an SM for the logits, would hold
  // the registers the kernel before them (the lm_head) needs for its next blocks.
  launch_cluster(sample_kernel, dim3(static_cast<unsigned>(rows), per_row), kThreads, 0, s, dim3(1, per_row), logits,
                 vocab, params, ids, logprobs, vec, fewer_passes);
}

}  // namespace tessera::ops::cuda
