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
  // tree) plus `extra` flags, and waits until it listens and, with `wait_ready`, until the model is
  // loaded and it serves (its "tessera serve: ready" line). Throws on failure, with the log.
  explicit ServerProcess(const std::vector<std::string>& extra = {}, bool wait_ready = true);
  ~ServerProcess();  // SIGKILL if still running

  // Waits for the "ready" line; throws with the log when the process exits or `timeout_s` passes.
  void wait_ready(double timeout_s = 120);
  // Waits for the process to exit on its own: its exit status, -1 when a signal ended it, -2 when
  // it still runs after `timeout_s`.
  int wait_exit(double timeout_s);

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
