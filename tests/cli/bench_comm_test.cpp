// tessera bench comm: every way to join ranks that the device offers, each message size checked
// and timed; bad flags refused by name.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

using test::tessera;

TEST(BenchComm, InProcessRanksOnTheCpuReportEverySize) {
  int rc = 0;
  const std::string out = tessera("bench comm --device cpu --ranks 3 --sizes 4KiB,100B,1MiB --iterations 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("3 ranks on --device cpu"), std::string::npos) << out;
  for (const char* col : {"algorithm", "time us", "algbw GB/s", "busbw GB/s"})
    EXPECT_NE(out.find(col), std::string::npos) << col << " missing in:\n" << out;
  // One row a size, in the order given, each with a positive time.
  std::istringstream lines(out);
  std::string line;
  int rows = 0;
  for (const char* size : {"4 KiB", "100 B", "1 MiB"}) {
    bool found = false;
    while (!found && std::getline(lines, line))
      if (line.rfind("in-process", 0) == 0 && line.find(size) != std::string::npos) {
        found = true;
        std::istringstream cols(line.substr(line.find(size) + std::string(size).size()));
        double us = 0;
        cols >> us;
        EXPECT_GT(us, 0.0) << line;
        ++rows;
      }
    EXPECT_TRUE(found) << size << " missing or out of order in:\n" << out;
  }
  EXPECT_EQ(rows, 3);
  EXPECT_NE(out.find("cpu threads, sums in host memory"), std::string::npos) << out;
}

TEST(BenchComm, RefusesBadFlagsByName) {
  int rc = 0;
  std::string out = tessera("bench comm --device cpu --ranks 2 --sizes 4XB", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--sizes"), std::string::npos) << out;
  out = tessera("bench comm --device cpu --ranks 2 --iterations 0", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--iterations"), std::string::npos) << out;
  out = tessera("bench comm --device tpu", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--device 'tpu'"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
