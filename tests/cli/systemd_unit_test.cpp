// packaging/systemd/tessera.service: its ExecStart is a command line `tessera serve` accepts
// (checked with --check-config, which parses without loading or binding), and its stop timeout
// leaves the server's shutdown drain room to finish.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tessera::test {
namespace {

// The [Service] section's keys, with backslash-continued lines joined (systemd's syntax).
std::map<std::string, std::string> service_keys(const std::string& unit) {
  std::map<std::string, std::string> keys;
  std::istringstream in(unit);
  std::string section, line, pending;
  while (std::getline(in, line)) {
    if (!pending.empty()) {
      line = pending + " " + line;
      pending.clear();
    }
    if (!line.empty() && line.back() == '\\') {
      pending = line.substr(0, line.size() - 1);
      continue;
    }
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const auto eq = line.find('=');
    if (section == "[Service]" && eq != std::string::npos) keys[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return keys;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

// TimeoutStopSec in seconds: "60", "60s", "2min", "1min 30s".
double systemd_seconds(const std::string& v) {
  double total = 0;
  const std::regex part(R"((\d+(?:\.\d+)?)\s*(min|s)?)");
  for (auto it = std::sregex_iterator(v.begin(), v.end(), part); it != std::sregex_iterator(); ++it)
    total += std::stod((*it)[1]) * ((*it)[2] == "min" ? 60 : 1);
  return total;
}

class SystemdUnit : public ::testing::Test {
 protected:
  void SetUp() override {
    keys_ = service_keys(read_file(std::filesystem::path(TESSERA_SOURCE_DIR) / "packaging/systemd/tessera.service"));
    ASSERT_TRUE(keys_.contains("ExecStart"));
    exec_ = words(keys_["ExecStart"]);
    ASSERT_GE(exec_.size(), 2u);
    ASSERT_TRUE(exec_[0].ends_with("/tessera")) << exec_[0];
    ASSERT_EQ(exec_[1], "serve");
  }
  // The unit's command line on the built binary, with `extra` arguments appended.
  int run(const std::vector<std::string>& extra, std::string* out) {
    std::string cmd = tessera_binary().string();
    for (size_t i = 1; i < exec_.size(); ++i) cmd += " " + shell_quote(exec_[i]);
    for (const auto& e : extra) cmd += " " + shell_quote(e);
    return run_command(cmd, out);
  }
  std::map<std::string, std::string> keys_;
  std::vector<std::string> exec_;
};

TEST_F(SystemdUnit, ExecStartFlagsAreAcceptedByServe) {
  std::string out;
  EXPECT_EQ(run({"--check-config"}, &out), 0) << out;
  EXPECT_NE(out.find("tessera serve: the flags are valid"), std::string::npos) << out;
  // --check-config does reject what serve would reject.
  EXPECT_NE(run({"--check-config", "--no-such-flag"}, &out), 0) << out;
  EXPECT_NE(run({"--check-config", "--shutdown-grace", "-1"}, &out), 0) << out;
}

TEST_F(SystemdUnit, StopTimeoutExceedsTheShutdownDrain) {
  EXPECT_EQ(keys_["KillSignal"], "SIGTERM");
  EXPECT_EQ(keys_["Restart"], "on-failure");
  double grace = 30;  // serve's default
  for (size_t i = 0; i + 1 < exec_.size(); ++i)
    if (exec_[i] == "--shutdown-grace") grace = std::stod(exec_[i + 1]);
  ASSERT_TRUE(keys_.contains("TimeoutStopSec"));
  // The drain: the grace, then at most 5 s for aborted requests to end (HttpServer::shutdown); the
  // process is gone 10 s after the grace whatever happens (cmd_serve's hard deadline), and systemd
  // must not SIGKILL before that.
  EXPECT_GE(systemd_seconds(keys_["TimeoutStopSec"]), grace + 10) << keys_["TimeoutStopSec"];
}

}  // namespace
}  // namespace tessera::test
