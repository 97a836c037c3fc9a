// tessera bench offline on the CPU reference over a tiny fixture: the report's rows, and requests
// paced as a Poisson process by --request-rate (the time the last one is due bounds the run).
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(BenchOffline, PacedArrivals) {
  int rc = 0;
  const std::string out = tessera("bench offline --model " + test::fixture_model_dir("dsv3-tiny") +
                                      " --num-requests 6 --input-len 4 --output-len 3 --request-rate 20 --seed 3",
                                  &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("arrivals: Poisson, 20.00 requests/s"), std::string::npos) << out;
  for (const char* row : {"output tokens/s", "TTFT", "ITL", "request latency"})
    EXPECT_NE(out.find(row), std::string::npos) << row << " missing in:\n" << out;
  EXPECT_NE(out.find("total "), std::string::npos) << out;
  EXPECT_NE(out.find(", 18 output tokens"), std::string::npos) << out;  // 6 requests x 3 tokens
  // The run lasts at least until the last arrival (5 gaps of mean 50 ms, printed in the header).
  const auto at = out.find("the last due at ");
  ASSERT_NE(at, std::string::npos) << out;
  const double last = std::stod(out.substr(at + 16));
  const auto total_at = out.find("\ntotal ");
  ASSERT_NE(total_at, std::string::npos) << out;
  EXPECT_GT(last, 0.0) << out;
  EXPECT_GE(std::stod(out.substr(total_at + 7)), last) << out;
}

TEST(BenchOffline, RefusesANegativeRequestRate) {
  int rc = 0;
  const std::string out = tessera("bench offline --model " + test::fixture_model_dir("dsv3-tiny") +
                                      " --num-requests 2 --input-len 4 --request-rate -1",
                                  &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--request-rate -1"), std::string::npos) << out;
}

// --trace records CUDA kernels: on the CPU backend it is refused before loading, by flag name.
TEST(BenchOffline, TraceNeedsTheCudaDevice) {
  int rc = 0;
  const std::string out = tessera(
      "bench offline --model " + test::fixture_model_dir("dsv3-tiny") + " --num-requests 2 --input-len 4 --trace", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--trace"), std::string::npos) << out;
  EXPECT_NE(out.find("--device cuda"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
