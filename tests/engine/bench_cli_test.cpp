// `tessera bench offline` on a fixture model with tiny sizes prints its report.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace tessera {
namespace {

TEST(BenchOfflineCli, PrintsThroughputAndLatencyPercentiles) {
  const std::string cmd = test::tessera_binary().string() + " bench offline --model " +
                          (test::fixtures_dir() / "models" / "dsv3-tiny").string() +
                          " --num-requests 6 --input-len 20 --output-len 5 --concurrency 3";
  std::string out;
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  for (const char* key : {"requests/s", "output tokens/s", "TTFT", "ITL", "p50", "p90", "p99"})
    EXPECT_NE(out.find(key), std::string::npos) << key << " missing in:\n" << out;
  EXPECT_NE(out.find("30 output tokens"), std::string::npos) << out;
}

TEST(BenchOfflineCli, ExplicitMaxModelLenThatCannotFitIsAnError) {
  const std::string cmd = test::tessera_binary().string() + " bench offline --model " +
                          (test::fixtures_dir() / "models" / "dsv3-tiny").string() +
                          " --num-requests 1 --input-len 4 --output-len 2 --kv-cache-bytes 1MiB --max-model-len 4000";
  std::string out;
  EXPECT_NE(test::run_command(cmd, &out), 0);
  EXPECT_NE(out.find("--kv-cache-bytes"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
