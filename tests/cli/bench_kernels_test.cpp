// tessera bench kernels --cases: the backend conformance table's cases in perf mode. On the CPU (any
// build) each case prints its median time, and the cases that declare their bytes and FLOPs print
// the rates; a bad family or a filter that matches nothing fails naming it.
#include <gtest/gtest.h>

#include <regex>

#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(BenchKernels, ConformanceCasesInPerfModeOnTheCpu) {
  int rc = 0;
  const std::string out = tessera("bench kernels --cases tiny --device cpu --iterations 2 --filter linear/", &rc);
  ASSERT_EQ(rc, 0) << out;
  // A row per case: op, family, shape, kernel, time, and for a linear its bytes and FLOP rates.
  const std::regex row(R"(linear\s+tiny\s+1x64x64\s+reference\s+[0-9.]+ us\s+[0-9.]+ GB/s\s+[0-9.]+ TFLOP/s)");
  EXPECT_TRUE(std::regex_search(out, row)) << out;
  EXPECT_EQ(out.find("mla_attention"), std::string::npos) << "--filter linear/ let another op through:\n" << out;
}

TEST(BenchKernels, BadCasesAndFiltersFailNamingTheFlag) {
  int rc = 0;
  std::string out = tessera("bench kernels --cases no-such-family --device cpu --iterations 1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("no-such-family"), std::string::npos) << out;
  out = tessera("bench kernels --cases tiny --device cpu --iterations 1 --filter zzz", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--filter"), std::string::npos) << out;
  out = tessera("bench kernels --device cpu", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--cases"), std::string::npos) << out;
  // The device's clock is a CUDA device's, and only the cases need it.
  out = tessera("bench kernels --cases tiny --device cpu --iterations 1 --device-clock", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--device-clock: only with --cases on --device cuda"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
