// Hostile command lines (issue #21): every numeric option of every command refuses NaN, infinities
// and empty values or list items, naming the option, before anything runs; id lists refuse empty
// items ("1,,2"). The options are found from each command's --help, so a numeric option added later
// is covered without editing this test.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tessera {
namespace {

std::string run(const std::string& args, int* rc) {
  std::string out;
  // A bound on each run: a check that failed to refuse could otherwise start a server.
  *rc = test::run_command("timeout 60 " + test::tessera_binary().string() + " " + args + " 2>&1", &out);
  return out;
}

// The subcommand names listed in a --help text's "Subcommands:" section.
std::vector<std::string> subcommands(const std::string& help) {
  std::vector<std::string> out;
  const auto at = help.find("Subcommands:");
  if (at == std::string::npos) return out;
  std::istringstream in(help.substr(at));
  std::string line;
  std::getline(in, line);
  const std::regex item(R"(^  ([a-z][a-z0-9-]*)\b)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, item)) out.push_back(m[1]);
  }
  return out;
}

struct NumericOption {
  std::string command;  // "generate", "bench load", ...
  std::string name;     // "--temperature"
  bool is_float = false;
};

// Every option whose --help line gives it a FLOAT, INT or UINT value, in every command.
std::vector<NumericOption> numeric_options() {
  std::vector<NumericOption> out;
  int rc = 0;
  std::vector<std::string> commands = subcommands(run("--help", &rc));
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string help = run(commands[i] + " --help", &rc);
    for (const std::string& sub : subcommands(help)) commands.push_back(commands[i] + " " + sub);
    const std::regex option(R"(^\s+(?:-\w,)?(--[a-z0-9-]+)\s+(FLOAT|INT|UINT)\b)");
    std::istringstream in(help);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, option)) out.push_back({commands[i], m[1], m[2] == "FLOAT"});
    }
  }
  return out;
}

void expect_refused(const std::string& args, const std::string& name, const std::string& why) {
  SCOPED_TRACE(args);
  int rc = 0;
  const std::string out = run(args, &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(name), std::string::npos) << "the message does not name " << name << ":\n" << out;
  EXPECT_NE(out.find(why), std::string::npos) << "the message does not say '" << why << "':\n" << out;
}

TEST(HostileCli, TheOptionScanFindsTheKnownNumericOptions) {
  // If the help format changed and the scan found nothing, the tests below would pass vacuously.
  std::set<std::string> found;
  for (const auto& o : numeric_options()) found.insert(o.command + " " + o.name);
  for (const std::string want : {"generate --temperature", "generate --max-tokens", "serve --port",
                                 "serve --gpu-memory-utilization", "serve --shutdown-grace", "make-checkpoint --layers",
                                 "make-checkpoint --shard-size-gb", "bench load --threads", "plan --latent-norm-eps"})
    EXPECT_TRUE(found.count(want)) << want << " not found among " << found.size() << " numeric options";
}

TEST(HostileCli, EveryFloatOptionRefusesNanAndInfinity) {
  int floats = 0;
  for (const auto& o : numeric_options()) {
    if (!o.is_float) continue;
    ++floats;
    for (const std::string v : {"nan", "-inf", "1e999"})
      expect_refused(o.command + " " + o.name + " " + v, o.name, "not a finite number");
  }
  EXPECT_GE(floats, 5);
}

TEST(HostileCli, EveryNumericOptionRefusesAnEmptyValue) {
  for (const auto& o : numeric_options()) expect_refused(o.command + " " + o.name + " ''", o.name, "empty");
}

TEST(HostileCli, IdListsRefuseEmptyItems) {
  for (const std::string ids : {"1,,2", ",1,2", "1,2,", ",", "1, ,2", "[1,,2]"}) {
    expect_refused("generate --model /nonexistent --prompt-ids '" + ids + "'", "--prompt-ids", "empty");
    expect_refused("logits --model /nonexistent --out /tmp/x.safetensors --prompt-ids '" + ids + "'", "--prompt-ids",
                   "empty");
    expect_refused("detokenize --model /nonexistent --ids '" + ids + "'", "--ids", "empty");
  }
  // Not numbers at all, or out of range.
  for (const std::string ids : {"1,x", "1.5", "-3", "4294967296", "0x10", "1;2"})
    expect_refused("generate --model /nonexistent --prompt-ids '" + ids + "'", "--prompt-ids", "not a token id");
  expect_refused("bench decode --synthetic tiny --device cpu --batch 1,,16", "--batch", "empty");
}

TEST(HostileCli, RangeChecksStillApplyToFiniteValues) {
  expect_refused("generate --model /nonexistent --prompt-ids 1 --temperature -1", "--temperature", "");
  expect_refused("plan --model /nonexistent --latent-norm-eps 0", "--latent-norm-eps", "");
  expect_refused("serve --gpu-memory-utilization 1.5", "--gpu-memory-utilization", "");
}

TEST(HostileCli, WellFormedValuesAreNotRefused) {
  // The checks refuse only what they should: these reach the model directory (which is missing).
  for (const std::string args : {"generate --model /nonexistent --prompt-ids '1, 2,3' --temperature 0.7",
                                 "generate --model /nonexistent --prompt-ids '[1,2]' --temperature 1e-3",
                                 "plan --model /nonexistent --latent-norm-eps 1e-6"}) {
    SCOPED_TRACE(args);
    int rc = 0;
    const std::string out = run(args, &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
    EXPECT_EQ(out.find("finite"), std::string::npos) << out;
    EXPECT_EQ(out.find("empty"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace tessera
