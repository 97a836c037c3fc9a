// Starts `tessera serve` on the demo model on a free loopback port for a test, and stops it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::test {

class ServerProcess {
 public:
  // Starts the server with the demo model (tokenizer from the fixtures, model cached in the build
  // tree) plus `extra` flags, and waits until it listens. Throws on failure, with the log.
  explicit ServerProcess(const std::vector<std::string>& extra = {});
  ~ServerProcess();  // SIGKILL if still running

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and waits up to `timeout_s`; returns the exit status (-1: did not exit / killed).
  int terminate(double timeout_s);
  std::string log() const;
  // The process was reaped by the test itself.
  void forget() { pid_ = -1; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::filesystem::path log_path_;
};

// Where the demo model is cached for all server tests.
std::filesystem::path server_test_demo_dir();

}  // namespace tessera::test
