// Helpers shared by the test programs.
#pragma once

#include <filesystem>
#include <string>

// AddressSanitizer builds: gcc defines __SANITIZE_ADDRESS__, clang (the asan preset) says it through
// __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_TEST_ASAN 1
#endif
#endif

namespace tessera::test {

// ../shared/fixtures (or $TESSERA_FIXTURES).
std::filesystem::path fixtures_dir();
// A fixture checkpoint's directory (fixtures_dir()/models/name), as a command-line argument.
inline std::string fixture_model_dir(const std::string& name) { return (fixtures_dir() / "models" / name).string(); }
// A fresh empty directory under the system temp dir, removed by the caller when done (or left for
// inspection on failure).
std::filesystem::path make_temp_dir(const std::string& prefix);
// Path of the built `tessera` binary.
std::filesystem::path tessera_binary();
// Runs a shell command, returns its exit status and fills `output` with stdout+stderr.
int run_command(const std::string& command, std::string* output);
// Runs the built tessera binary with `args` (warnings and errors only in its log), stores its exit status in `*rc`
// and returns its stdout+stderr.
std::string tessera(const std::string& args, int* rc);
std::string read_file(const std::filesystem::path& p);

// The fixture checkpoints in shared/fixtures/models, and a gtest-safe name for each.
inline const std::string kFixtureModels[] = {"dsv3-tiny", "dsv3-tiny-fp8", "kimi-k2-tiny", "kimi-k25-tiny-nvfp4"};
inline std::string fixture_test_name(std::string name) {
  for (auto& ch : name)
    if (ch == '-') ch = '_';
  return name;
}
void write_file(const std::filesystem::path& p, const std::string& content);

}  // namespace tessera::test
