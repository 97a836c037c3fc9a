// Is the batch-1 NVFP4 routed-expert kernel held by its DRAM access pattern? Times reads of the
// same bytes (8 experts x gate and up x 2048 rows x 7168 NVFP4 values: 117 MB of codes and 14.7 MB
// of scales) in the pattern quant_expert_mma_kernel uses (each warp streams 8 rows of gate and 8
// of up; a load instruction takes 64 bytes of each of 8 rows, 4 K blocks in flight) and in
// variants of it: a lane's K blocks in runs, the loads asking L2 for 256-byte segments, and codes
// stored in tiles of 8 rows x a K block (a warp's load instruction takes 512 contiguous bytes);
// against a plain contiguous read and a device copy measured in the same run. No decode or MMA:
// loads only, each lane XORs what it read into one word that is stored, so nothing is optimised
// away. The first call of a row is its own warm-up; 5 copies of the bytes rotate so that L2 holds
// none of a call's bytes.
//
// What it said on an H100 (docs/PERFORMANCE.md, "The routed experts' DRAM access pattern"): the
// kernel's pattern alone reads at 67-68% of copy, tiles at 85-87%, runs of 2 blocks at 72-74%,
// .L2::256B loads and more blocks in flight not faster. Built into the kernels, tiles measured
// 2.8% faster a layer at batch 1 and 2.6% slower at 16 (the ring's TMA boxes), so they were not
// kept: the kernel is held about as much by its decode chain as by its pattern.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/dev/access_pattern_bench.cu -o access_pattern_bench
//   ./access_pattern_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>  // std::exit
#include <vector>

namespace {

constexpr int kExperts = 8, kRows = 2048, kK = 7168;
constexpr int kRowBytes = kK / 2, kScaleRowBytes = kK / 16;  // NVFP4: 4 bits a value, an e4m3 scale per 16
constexpr int kBlockK = 128, kBlocks = kK / kBlockK;         // 56 K blocks of 64 bytes a row
constexpr int kWarps = 8, kRowsPerWarp = 8;
constexpr size_t kMatrixBytes = size_t(kExperts) * kRows * kRowBytes;  // one of gate / up
constexpr size_t kScaleBytes = size_t(kExperts) * kRows * kScaleRowBytes;

// kL2Fetch256: the load asks L2 to fetch the whole 256-byte segment around it from DRAM (.L2::256B).
template <bool kL2Fetch256 = false>
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  if constexpr (kL2Fetch256)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

struct Buf {
  const uint8_t* gate;
  const uint8_t* up;
  const uint8_t* gate_scale;
  const uint8_t* up_scale;
};

// kTiled false: row-major codes as stored today (row n at n * 3584 bytes); lane (g, c) reads 16
// bytes of row n0 + g a K block and the 2 scale bytes of those 32 values: with kRun 1 (today's
// kernel) bytes [64 kb + 16 c, + 16), so a load instruction takes 64 bytes of each of its 8 rows;
// with kRun R the lane's R consecutive K blocks are one run of 16 R bytes ([64 R j + 16 R c + 16 q,
// + 16) for block R j + q), so R consecutive instructions take 64 R contiguous bytes of each row.
// kTiled true: each warp's 8 rows stored as one tile, K block after K block (512 bytes each, lane
// l at 16 l), scales likewise (64 bytes a K block, lane l at 2 l).
template <bool kTiled, int kAhead, bool kScales, int kRun = 1, bool kScalesTiled = kTiled, bool kL2Fetch256 = false>
__global__ void __launch_bounds__(kWarps * 32) expert_pattern(Buf b, uint32_t* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int e = blockIdx.y;
  const int n0 = (blockIdx.x * kWarps + warp) * kRowsPerWarp;
  const size_t tile = (size_t(e) * kRows + n0) * kRowBytes;  // the warp's 8 rows: 28672 bytes either way
  const size_t stile = (size_t(e) * kRows + n0) * kScaleRowBytes;
  const uint8_t* src[2] = {b.gate + tile, b.up + tile};
  const uint8_t* ssrc[2] = {b.gate_scale + stile, b.up_scale + stile};
  uint32_t x = 0;
  for (int kb0 = 0; kb0 < kBlocks; kb0 += kAhead) {
    uint4 raw[2][kAhead];
    uint32_t sc[2][kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int kb = kb0 + u;
      const bool in = kb < kBlocks;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int j = kb / kRun, q = kb % kRun;
        const size_t off =
            kTiled ? size_t(kb) * 512 + 16 * lane : size_t(g) * kRowBytes + 64 * kRun * j + 16 * kRun * c + 16 * q;
        raw[s][u] = in ? ld_stream<kL2Fetch256>(src[s] + off) : make_uint4(0, 0, 0, 0);
        if (kScales) {
          const size_t soff = kScalesTiled ? size_t(kb) * 64 + 2 * lane
                                           : size_t(g) * kScaleRowBytes + 8 * kRun * j + 2 * kRun * c + 2 * q;
          sc[s][u] = in ? __ldg(reinterpret_cast<const unsigned short*>(ssrc[s] + soff)) : 0u;
        } else {
          sc[s][u] = 0;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
#pragma unroll
      for (int s = 0; s < 2; ++s) x ^= raw[s][u].x ^ raw[s][u].y ^ raw[s][u].z ^ raw[s][u].w ^ sc[s][u];
  }
  out[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = x;
}

// A plain contiguous read of n 16-byte words, 4 in flight a thread.
__global__ void plain_read(const uint4* p, size_t n, uint32_t* out) {
  uint32_t x = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = ld_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = ld_stream(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = x;
}

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t err_ = (x);                                                             \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int kCopies = 5;  // rotate over 5 copies (660 MB) so that L2 (50 MB) holds none of a call's bytes

template <typename Launch>
float median_us(Launch&& launch, int reps) {
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  std::vector<float> t;
  for (int r = 0; r < reps + kCopies; ++r) {
    CHECK(cudaEventRecord(a));
    launch(r % kCopies);
    CHECK(cudaEventRecord(z));
    CHECK(cudaEventSynchronize(z));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, z));
    if (r >= kCopies) t.push_back(ms * 1000.0f);  // the first round warms up
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const size_t per_copy = 2 * kMatrixBytes + 2 * kScaleBytes;
  std::vector<uint8_t*> base(kCopies);
  for (auto& p : base) {
    CHECK(cudaMalloc(&p, per_copy));
    CHECK(cudaMemset(p, 0x5a, per_copy));
  }
  uint32_t* out;
  CHECK(cudaMalloc(&out, size_t(1) << 24));
  auto buf = [&](int i) {
    return Buf{base[i], base[i] + kMatrixBytes, base[i] + 2 * kMatrixBytes, base[i] + 2 * kMatrixBytes + kScaleBytes};
  };
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, sms);

  // The ceiling: a 1 GiB device copy (bytes read + written).
  const size_t copy_bytes = size_t(1) << 30;
  uint8_t *ca, *cb;
  CHECK(cudaMalloc(&ca, copy_bytes));
  CHECK(cudaMalloc(&cb, copy_bytes));
  const float copy_us =
      median_us([&](int) { CHECK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice)); }, 10);
  const double copy_gbs = 2.0 * copy_bytes / copy_us / 1e3;
  std::printf("device copy 1 GiB: %.1f us, %.0f GB/s (read + written)\n", copy_us, copy_gbs);
  CHECK(cudaFree(ca));
  CHECK(cudaFree(cb));

  const int reps = 30;
  auto report = [&](const char* name, double bytes, float us) {
    std::printf("%-44s %8.1f us %7.0f GB/s %5.1f%% of copy\n", name, us, bytes / us / 1e3,
                100.0 * bytes / us / 1e3 / copy_gbs);
  };
  const dim3 grid(kRows / (kWarps * kRowsPerWarp), kExperts), block(kWarps * 32);
  const double codes = 2.0 * kMatrixBytes, all = codes + 2.0 * kScaleBytes;
  for (int pass = 0; pass < 2; ++pass) {
    std::printf("-- round %d\n", pass + 1);
    report("plain read, codes + scales bytes", all,
           median_us(
               [&](int i) {
                 plain_read<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(base[i]), size_t(all) / 16, out);
               },
               reps));
    report("rows (today), 4 ahead, codes only", codes,
           median_us([&](int i) { expert_pattern<false, 4, false><<<grid, block>>>(buf(i), out); }, reps));
    report("rows (today), 4 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<false, 4, true><<<grid, block>>>(buf(i), out); }, reps));
    report("rows (today), 8 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<false, 8, true><<<grid, block>>>(buf(i), out); }, reps));
    report(
        "rows (today), 4 ahead, loads .L2::256B", all,
        median_us([&](int i) { expert_pattern<false, 4, true, 1, false, true><<<grid, block>>>(buf(i), out); }, reps));
    report(
        "rows (today), 2 ahead, loads .L2::256B", all,
        median_us([&](int i) { expert_pattern<false, 2, true, 1, false, true><<<grid, block>>>(buf(i), out); }, reps));
    report("tiled, 4 ahead, loads .L2::256B", all,
           median_us([&](int i) { expert_pattern<true, 4, true, 1, true, true><<<grid, block>>>(buf(i), out); }, reps));
    report("rows, runs of 2 blocks, 4 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<false, 4, true, 2><<<grid, block>>>(buf(i), out); }, reps));
    report("rows, runs of 4 blocks, 4 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<false, 4, true, 4><<<grid, block>>>(buf(i), out); }, reps));
    report("rows, runs of 2 blocks, 2 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<false, 2, true, 2><<<grid, block>>>(buf(i), out); }, reps));
    report("tiled, 4 ahead, codes only", codes,
           median_us([&](int i) { expert_pattern<true, 4, false><<<grid, block>>>(buf(i), out); }, reps));
    report("tiled, 4 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<true, 4, true><<<grid, block>>>(buf(i), out); }, reps));
    report("tiled codes, row-major scales, 4 ahead", all,
           median_us([&](int i) { expert_pattern<true, 4, true, 1, false><<<grid, block>>>(buf(i), out); }, reps));
    report("tiled, 8 ahead, codes + scales", all,
           median_us([&](int i) { expert_pattern<true, 8, true><<<grid, block>>>(buf(i), out); }, reps));
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}
