// The one table of TESSERA_* environment variables (core/env.h): reads go through it by a declared
// name, and no source file reads one behind its back.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"

namespace tessera {
namespace {

TEST(Env, UndeclaredNameIsAnError) {
  try {
    (void)core::env_value("TESSERA_NO_SUCH_SWITCH");
    ADD_FAILURE() << "an undeclared switch was read";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_NO_SUCH_SWITCH"), std::string::npos) << e.what();
  }
}

TEST(Env, OnOffSwitchIsOffOnlyAtZero) {
  ::unsetenv("TESSERA_PDL");
  EXPECT_TRUE(core::env_switch_on("TESSERA_PDL"));
  EXPECT_FALSE(core::env_value("TESSERA_PDL").has_value());
  ::setenv("TESSERA_PDL", "0", 1);
  EXPECT_FALSE(core::env_switch_on("TESSERA_PDL"));
  EXPECT_EQ(core::env_value("TESSERA_PDL"), "0");
  ::setenv("TESSERA_PDL", "1", 1);
  EXPECT_TRUE(core::env_switch_on("TESSERA_PDL"));
  ::setenv("TESSERA_PDL", "", 1);  // empty = unset
  EXPECT_FALSE(core::env_value("TESSERA_PDL").has_value());
  ::unsetenv("TESSERA_PDL");
}

TEST(Env, StrictFlagTakesItsDefaultAndRejectsOtherValues) {
  // Declared with default "0" and "1" in core/env.cpp.
  ::unsetenv("TESSERA_SHARED_EXPERT_FOLD");
  ::unsetenv("TESSERA_EXPERT_RING");
  EXPECT_FALSE(core::env_flag("TESSERA_SHARED_EXPERT_FOLD"));
  EXPECT_TRUE(core::env_flag("TESSERA_EXPERT_RING"));
  ::setenv("TESSERA_SHARED_EXPERT_FOLD", "1", 1);
  ::setenv("TESSERA_EXPERT_RING", "0", 1);
  EXPECT_TRUE(core::env_flag("TESSERA_SHARED_EXPERT_FOLD"));
  EXPECT_FALSE(core::env_flag("TESSERA_EXPERT_RING"));
  ::setenv("TESSERA_EXPERT_RING", "", 1);  // empty = unset: the default
  EXPECT_TRUE(core::env_flag("TESSERA_EXPERT_RING"));
  ::setenv("TESSERA_SHARED_EXPERT_FOLD", "yes", 1);
  try {
    (void)core::env_flag("TESSERA_SHARED_EXPERT_FOLD");
    ADD_FAILURE() << "TESSERA_SHARED_EXPERT_FOLD=yes was taken";
  } catch (const core::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("TESSERA_SHARED_EXPERT_FOLD=yes"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 0 or 1"), std::string::npos) << what;
  }
  ::unsetenv("TESSERA_SHARED_EXPERT_FOLD");
  ::unsetenv("TESSERA_EXPERT_RING");
}

TEST(Env, WholeNumberTakesItsDefaultAndRejectsOtherValuesByName) {
  // Declared with default "0" in core/env.cpp.
  ::unsetenv("TESSERA_EXPERT_PREFETCH");
  EXPECT_EQ(core::env_int("TESSERA_EXPERT_PREFETCH", 0, 64), 0);
  ::setenv("TESSERA_EXPERT_PREFETCH", "3", 1);
  EXPECT_EQ(core::env_int("TESSERA_EXPERT_PREFETCH", 0, 64), 3);
  ::setenv("TESSERA_EXPERT_PREFETCH", "64", 1);
  EXPECT_EQ(core::env_int("TESSERA_EXPERT_PREFETCH", 0, 64), 64);
  for (const char* bad : {"65", "-1", "2x", "two", " 2"}) {
    ::setenv("TESSERA_EXPERT_PREFETCH", bad, 1);
    try {
      (void)core::env_int("TESSERA_EXPERT_PREFETCH", 0, 64);
      ADD_FAILURE() << "TESSERA_EXPERT_PREFETCH=" << bad << " was taken";
    } catch (const core::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("TESSERA_EXPERT_PREFETCH=") + bad), std::string::npos) << what;
      EXPECT_NE(what.find("from 0 to 64"), std::string::npos) << what;
    }
  }
  ::unsetenv("TESSERA_EXPERT_PREFETCH");
}

TEST(Env, EverySwitchHasADocAndAUniqueName) {
  std::set<std::string> names;
  for (const auto& s : core::env_switches()) {
    EXPECT_EQ(std::string(s.name).rfind("TESSERA_", 0), 0u) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
    EXPECT_GT(std::string(s.doc).size(), 10u) << s.name;
  }
}

// Scans the sources: a getenv of a TESSERA_* name outside core/env.cpp, or a switch read by a name
// the table lacks (which would throw only when that code path runs), fails here.
TEST(Env, SourcesReadSwitchesOnlyThroughTheTable) {
  std::set<std::string> declared;
  for (const auto& s : core::env_switches()) declared.insert(s.name);
  const std::regex raw(R"(getenv\(\s*"(TESSERA_[A-Z0-9_]+)\")");
  const std::regex named(R"((env_value|env_switch_on|env_flag|env_int|ab_switch_on)\(\s*"(TESSERA_[A-Z0-9_]+)\")");
  int files = 0;
  for (const char* area : {"src", "bench", "tests"}) {
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(TESSERA_SOURCE_DIR) / area)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string rel = std::filesystem::relative(e.path(), TESSERA_SOURCE_DIR).string();
      if (rel == "src/core/env.cpp" || rel == "tests/core/env_test.cpp") continue;
      ++files;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      for (std::sregex_iterator m(text.begin(), text.end(), raw), end; m != end; ++m)
        ADD_FAILURE() << rel << " reads " << (*m)[1] << " with getenv: use core::env_value";
      for (std::sregex_iterator m(text.begin(), text.end(), named), end; m != end; ++m)
        EXPECT_TRUE(declared.count((*m)[2])) << rel << " reads " << (*m)[2] << ", which core/env.cpp does not declare";
    }
  }
  EXPECT_GT(files, 100);  // the scan saw the tree
}

}  // namespace
}  // namespace tessera
