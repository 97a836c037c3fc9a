#include "server_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <stdexcept>
#include <thread>

#include "core/env.h"
#include "support/test_support.h"

namespace tessera::test {

std::filesystem::path server_test_demo_dir() {
  // TESSERA_SERVER_TEST_DIR: tests run outside the build tree (the GPU machine).
  return std::filesystem::path(core::env_value("TESSERA_SERVER_TEST_DIR").value_or(TESSERA_SERVER_TEST_DIR)) /
         "demo-cache";
}

ServerProcess::ServerProcess(const std::vector<std::string>& extra, bool wait_ready_too) {
  log_path_ = make_temp_dir("tessera-serve") / "serve.log";
  std::vector<std::string> args = {tessera_binary().string(),
                                   "serve",
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   "0",
                                   "--demo-dir",
                                   server_test_demo_dir().string(),
                                   "--demo-tokenizer",
                                   (fixtures_dir() / "tokenizers" / "deepseek-v3").string(),
                                   "--kv-cache-bytes",
                                   "64MiB",
                                   "--enable-test-script"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    FILE* f = std::freopen(log_path_.c_str(), "w", stdout);
    if (!f) ::_exit(127);
    ::dup2(::fileno(stdout), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = log();
    if (std::regex_search(text, m, re)) {
      port_ = std::stoi(m[1]);
      if (wait_ready_too)
        wait_ready(std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      return;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("tessera serve exited during start-up:\n" + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("tessera serve did not start within 120 s:\n" + log());
}

void ServerProcess::wait_ready(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    if (text.find("tessera serve: ready\n") != std::string::npos) return;
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("tessera serve exited while loading the model:\n" + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("tessera serve was not ready within the time:\n" + log());
}

int ServerProcess::wait_exit(double timeout_s) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -2;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string ServerProcess::log() const { return std::filesystem::exists(log_path_) ? read_file(log_path_) : ""; }

int ServerProcess::terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace tessera::test
