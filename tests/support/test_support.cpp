#include "support/test_support.h"

#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "core/env.h"

namespace tessera::test {

std::filesystem::path fixtures_dir() {
  const std::filesystem::path dir = core::env_value("TESSERA_FIXTURES").value_or(TESSERA_FIXTURES_DIR);
  if (!std::filesystem::is_directory(dir / "models"))
    throw std::runtime_error("test fixtures not found at " + dir.string() +
                             ": tests expect ../shared/fixtures beside the repository, or set TESSERA_FIXTURES");
  return dir;
}

std::filesystem::path make_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  auto p = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// TESSERA_BINARY overrides the build tree's binary (tests run on another machine, e.g. the GPU one).
std::filesystem::path tessera_binary() { return core::env_value("TESSERA_BINARY").value_or(TESSERA_BINARY); }

int run_command(const std::string& command, std::string* output) {
  std::string cmd = command + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = ::pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string tessera(const std::string& args, int* rc) {
  std::string out;
  *rc = run_command(tessera_binary().string() + " --log-level warn " + args, &out);
  return out;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace tessera::test
