// The NCCL communicator (ops/cuda/nccl.h, issue 17) with the ranks this machine has: one rank on
// one GPU (the process's device memory pool serves one device, so ranks on several GPUs of one
// process wait for per-device pools). One rank's collectives are identities, which is what this
// checks through NCCL itself, the backend's stream and the pitched copies of the gather; the sums
// of several ranks run where several GPUs are lent. Skips itself without a GPU or without NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_ops.h"
#ifdef TESSERA_HAVE_NCCL
#include "ops/cuda/nccl.h"
#endif
#include "support/require_gpu.h"

namespace tessera {
namespace {

TEST(Nccl, OneRankCollectivesThroughTheBackendsStream) {
#ifndef TESSERA_HAVE_NCCL
  TESSERA_SKIP_UNLESS_REQUIRED("built without NCCL (TESSERA_NCCL_ROOT)");
#else
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const std::string version = ops::cuda::nccl_version();
  EXPECT_EQ(version.rfind("2.", 0), 0u) << version;
  ops::cuda::NcclGroup group({0});
  auto comm = group.communicator(0);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  auto o = ops::make_backend("cuda:0", "", /*enforce_eager=*/true);

  std::vector<float> xs(3 * 5);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25f * static_cast<float>(i) - 1.0f;
  core::Tensor x = o->from_host_f32({3, 5}, xs.data());
  comm->all_reduce_sum(*o, x);
  EXPECT_EQ(o->to_host_f32(x), xs);  // the sum over one rank

  // A part narrower than its padded block would be on several ranks: rows 7 floats apart.
  std::vector<float> part(2 * 7);
  for (size_t i = 0; i < part.size(); ++i) part[i] = 100.0f + static_cast<float>(i);
  core::Tensor p = o->from_host_f32({2, 7}, part.data());
  core::Tensor out = o->empty({2, 7});
  comm->all_gather_cols(*o, p, out);
  EXPECT_EQ(o->to_host_f32(out), part);

  // Reduce-scatter over one rank: its columns are all of them, summed over itself.
  core::Tensor scattered = o->empty({2, 7});
  comm->reduce_scatter_cols(*o, p, scattered);
  EXPECT_EQ(o->to_host_f32(scattered), part);

  // A part that is not the balanced split's share is refused by name.
  core::Tensor wide = o->empty({2, 8});
  try {
    comm->all_gather_cols(*o, wide, out);
    FAIL() << "a part of 8 columns for an output of 7 was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 1 holds 8 of 7 columns"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace
}  // namespace tessera
