// Programmatic dependent launch (src/ops/cuda/runtime/launch.cuh) is correct only if every kernel
// launched with launch_dependent() (or launch_dependent_cluster()) waits (pdl_wait()) before it reads what the kernel
// before it wrote, and no block of it finishes before that wait: a grid that completes early lets the next kernel's
// wait return while the one before still runs. A kernel that breaks either rule races silently, so the sources are
// scanned here (CPU only, every build).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Comments blanked (newlines kept), so that words in them are not code.
std::string strip_comments(const std::string& s) {
  std::string out = s;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '/' && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      const size_t end = out.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? out.size() : end + 2;
      for (; i < stop; ++i)
        if (out[i] != '\n') out[i] = ' ';
    }
  }
  return out;
}

// The position just past the bracket closing the one at `open`, or npos.
size_t past_match(const std::string& s, size_t open, char o, char c) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == o) ++depth;
    if (s[i] == c && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

struct Function {
  std::string file, body;
  bool kernel = false;
};

// Every function defined in `text` (name, parameter list, qualifiers, body), keyed by name; the
// control keywords that look the same are skipped.
void collect_functions(const std::string& file, const std::string& text, std::multimap<std::string, Function>& out) {
  static const std::set<std::string> keywords = {"if", "for", "while", "switch", "catch", "return", "sizeof"};
  static const std::regex head(R"((\w+)\s*\()");
  for (std::sregex_iterator m(text.begin(), text.end(), head), end; m != end; ++m) {
    const std::string name = (*m)[1];
    if (keywords.count(name)) continue;
    const size_t open = static_cast<size_t>(m->position(0) + m->length(0)) - 1;
    const size_t close = past_match(text, open, '(', ')');
    if (close == std::string::npos) continue;
    size_t i = close;
    while (i < text.size() && text[i] != '{' && text[i] != ';' && text[i] != '(' && text[i] != ')' && text[i] != '=' &&
           text[i] != ',')
      ++i;
    if (i >= text.size() || text[i] != '{') continue;
    const size_t body_end = past_match(text, i, '{', '}');
    if (body_end == std::string::npos) continue;
    Function f{file, text.substr(i, body_end - i), false};
    // `__global__ void` may sit a line above the name (after __launch_bounds__).
    const size_t from = text.rfind("__global__", static_cast<size_t>(m->position(0)));
    f.kernel = from != std::string::npos && text.find_first_of(";{}", from) >= static_cast<size_t>(m->position(0));
    out.emplace(name, std::move(f));
  }
}

// Where `body` first calls pdl_wait (with or without an argument), or npos.
size_t first_wait(const std::string& body) {
  static const std::regex call(R"(\bpdl_wait\s*\()");
  std::smatch m;
  return std::regex_search(body, m, call) ? static_cast<size_t>(m.position(0)) : std::string::npos;
}

// `body` with the bodies of the lambdas in it removed (their returns are not the kernel's).
std::string without_lambdas(std::string body) {
  // (A return type may be a pointer or a reference: `-> const T* {`.)
  static const std::regex lambda(R"(\[[^\[\]]*\]\s*\([^()]*\)\s*(mutable\s*)?(->\s*[\w:<>\s*&]+)?\{)");
  std::smatch m;
  std::string out;
  while (std::regex_search(body, m, lambda)) {
    const size_t open = static_cast<size_t>(m.position(0) + m.length(0)) - 1;
    const size_t close = past_match(body, open, '{', '}');
    if (close == std::string::npos) break;
    out += body.substr(0, static_cast<size_t>(m.position(0)));
    body = body.substr(close);
  }
  return out + body;
}

TEST(PdlLaunchRules, EveryDependentLaunchWaitsAndNoBlockFinishesFirst) {
  std::map<std::string, std::string> files;
  std::multimap<std::string, Function> functions;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::filesystem::path(TESSERA_SOURCE_DIR) / "src/ops/cuda")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
    const std::string rel = std::filesystem::relative(e.path(), TESSERA_SOURCE_DIR).string();
    files[rel] = strip_comments(read(e.path()));
    collect_functions(rel, files[rel], functions);
  }
  ASSERT_GT(files.size(), 10u);  // the scan saw the kernels

  auto is_kernel = [&](const std::string& name) {
    auto [a, b] = functions.equal_range(name);
    for (auto it = a; it != b; ++it)
      if (it->second.kernel) return true;
    return false;
  };
  std::set<std::string> kernels, waiting_helpers;
  for (const auto& [name, f] : functions) {
    if (f.kernel) kernels.insert(name);
    if (!f.kernel && first_wait(f.body) != std::string::npos) waiting_helpers.insert(name);
  }
  ASSERT_GT(kernels.size(), 20u);
  // Waits: pdl_wait() in its body, or a call of a device function that has it.
  auto waits = [&](const Function& f) {
    if (first_wait(f.body) != std::string::npos) return true;
    for (const std::string& h : waiting_helpers)
      if (std::regex_search(f.body, std::regex("\\b" + h + "\\s*(<[^;]*>)?\\s*\\(")) && h != "pdl_wait") return true;
    return false;
  };

  // Rule 1: what launch_dependent launches waits. The launched name is a kernel, or a variable set
  // a few lines above from kernel names (or from a function returning one of them).
  static const std::regex launch(R"(launch_dependent(?:_cluster)?\(\s*(\w+))");
  int launches = 0;
  for (const auto& [rel, text] : files) {
    for (std::sregex_iterator m(text.begin(), text.end(), launch), end; m != end; ++m) {
      const std::string id = (*m)[1];
      if (rel == "src/ops/cuda/runtime/launch.cuh") continue;  // the definition
      ++launches;
      std::set<std::string> targets;
      if (is_kernel(id)) {
        targets.insert(id);
      } else {
        const size_t at = static_cast<size_t>(m->position(0));
        const size_t from = at > 2000 ? at - 2000 : 0;
        const std::string before = text.substr(from, at - from);
        const std::regex assign("\\b" + id + "\\s*=([^;]*);");
        std::string rhs;
        for (std::sregex_iterator a(before.begin(), before.end(), assign), e2; a != e2; ++a) rhs = (*a)[1];
        for (const std::string& k : kernels)
          if (std::regex_search(rhs, std::regex("\\b" + k + "\\b"))) targets.insert(k);
        // A function returning the kernel: the kernels its body names.
        static const std::regex call(R"((\w+)\s*\()");
        for (std::sregex_iterator c(rhs.begin(), rhs.end(), call), e3; c != e3; ++c) {
          auto [a, b] = functions.equal_range((*c)[1]);
          for (auto it = a; it != b; ++it)
            for (const std::string& k : kernels)
              if (std::regex_search(it->second.body, std::regex("\\b" + k + "\\b"))) targets.insert(k);
        }
      }
      if (targets.empty()) {
        ADD_FAILURE() << rel << ": launch_dependent(" << id
                      << ", ...) launches something this scan cannot name: launch a kernel by name or set the "
                         "variable from kernel names just above";
        continue;
      }
      for (const std::string& k : targets) {
        auto [a, b] = functions.equal_range(k);
        for (auto it = a; it != b; ++it) {
          if (!it->second.kernel) continue;
          EXPECT_TRUE(waits(it->second)) << k << " (" << it->second.file << ") is launched with launch_dependent in "
                                         << rel << " but never calls pdl_wait()";
        }
      }
    }
  }
  EXPECT_GT(launches, 10);

  // Rule 2: no return before the wait, in any kernel that waits itself.
  for (const auto& [name, f] : functions) {
    if (!f.kernel) continue;
    const std::string body = without_lambdas(f.body);
    const size_t wait = first_wait(body);
    if (wait == std::string::npos) continue;
    EXPECT_FALSE(std::regex_search(body.substr(0, wait), std::regex(R"(\breturn\b)")))
        << name << " (" << f.file << ") can return before pdl_wait(): a grid whose blocks all do finishes before "
        << "the kernel it depends on, and the next kernel's wait no longer orders it";
  }
}

}  // namespace
}  // namespace tessera
