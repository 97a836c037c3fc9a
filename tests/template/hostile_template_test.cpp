// Hostile chat templates (issue #21): whatever a template does, parsing and rendering end in output
// or a TemplateError that says which limit was hit, with the memory the process holds bounded by the
// render's memory budget, and no expression or statement chain deep enough to overflow the stack.
//
// Memory is measured here, not taken from the engine's own count: this program replaces the global
// operator new/delete with counting ones and asserts on the peak of live bytes during each render.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "text/template/template.h"

namespace {

// Live bytes allocated through operator new, and their high-water mark since the last reset.
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

constexpr size_t kHeader = 16;  // keeps the user pointer 16-byte aligned

void* counted_alloc(size_t n) {
  void* p = std::malloc(n + kHeader);
  if (!p) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kHeader;
}

void counted_free(void* q) noexcept {
  if (!q) return;
  void* p = static_cast<char*>(q) - kHeader;
  g_live.fetch_sub(static_cast<int64_t>(*static_cast<size_t*>(p)));
  std::free(p);
}

}  // namespace

void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace tessera::text {
namespace {

using J = nlohmann::ordered_json;

constexpr int64_t kMiB = 1 << 20;

// Limits small enough that a test reaches them in milliseconds, sanitizers included.
TemplateLimits small_limits() {
  TemplateLimits l;
  l.max_memory_bytes = 16 * kMiB;
  l.max_string_bytes = 8 * kMiB;
  return l;
}

struct Outcome {
  std::string error;  // empty when it rendered
  std::string output;
  int64_t peak_bytes = 0;  // peak live bytes above those held before parsing
};

Outcome run(const std::string& src, const TemplateLimits& limits, const J& vars = J::object()) {
  Outcome o;
  const int64_t base = g_live.load();
  g_peak.store(base);
  try {
    o.output = Template::parse(src, limits).render(vars);
  } catch (const TemplateError& e) {
    o.error = e.what();
  }
  o.peak_bytes = g_peak.load() - base;
  return o;
}

// The render fails with a message holding `what`, and never held more than `max_bytes`.
void expect_refused(const std::string& name, const std::string& src, const TemplateLimits& limits,
                    const std::string& what, int64_t max_bytes) {
  SCOPED_TRACE(name);
  const Outcome o = run(src, limits);
  EXPECT_NE(o.error.find(what), std::string::npos)
      << "error: '" << o.error << "' (output " << o.output.size() << " bytes)";
  EXPECT_LE(o.peak_bytes, max_bytes) << "peak memory " << o.peak_bytes << " bytes";
}

std::string repeated(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// ---- the counter itself ----------------------------------------------------------------------------

TEST(HostileTemplateMemory, TheCounterSeesARendersAllocations) {
  // A template that legitimately builds a 4 MiB string: the counter must see it, or the bounds below
  // would prove nothing.
  const Outcome o = run("{{ ('x' * 4194304) | length }}", TemplateLimits{});
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.output, "4194304");
  EXPECT_GE(o.peak_bytes, 4 * kMiB);
}

// ---- memory budget -------------------------------------------------------------------------------

constexpr const char* kBudget = "memory budget";

TEST(HostileTemplateMemory, HugeRangeIsRefusedBeforeItIsBuilt) {
  const int64_t small = 2 * kMiB;  // nothing like the list's size is ever allocated
  expect_refused("range(10**12)", "{{ range(1000000000000) | length }}", small_limits(), kBudget, small);
  expect_refused("range(start, stop, step)", "{% for i in range(-5, 9000000000000000000, 3) %}{% endfor %}",
                 small_limits(), kBudget, small);
  expect_refused("negative step", "{{ range(9000000000000000000, -9000000000000000000, -1) | list | length }}",
                 small_limits(), kBudget, small);
  // With the default limits too: 10**9 Values would be 70 GB.
  expect_refused("range(10**9), default limits", "{{ range(1000000000) | length }}", TemplateLimits{}, kBudget, small);
}

TEST(HostileTemplateMemory, DoublingListsStopAtTheBudget) {
  const int64_t bound = 3 * 16 * kMiB;  // what was counted, plus the one copy being built
  expect_refused("l + l",
                 "{% set ns = namespace(l=[1, 2, 3, 4]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}"
                 "{% endfor %}{{ ns.l | length }}",
                 small_limits(), kBudget, bound);
  expect_refused("l * 2",
                 "{% set ns = namespace(l=['ab']) %}{% for i in range(60) %}{% set ns.l = ns.l * 2 %}"
                 "{% endfor %}{{ ns.l | length }}",
                 small_limits(), kBudget, bound);
  expect_refused("extend with itself",
                 "{% set l = [1] %}{% for i in range(60) %}{% set _ = l.extend(l) %}"
                 "{% endfor %}{{ l | length }}",
                 small_limits(), kBudget, bound);
  // 2M items: under the object limit (4M), 140 MB of Values.
  expect_refused("list repeat by a large count", "{{ ([1, 2] * 1000000) | length }}", small_limits(), kBudget, bound);
}

TEST(HostileTemplateMemory, SplitIntoManyPiecesStopsAtTheBudget) {
  // 6 MiB of "a " (under the string limit) would split into 3M strings, ~300 MB of parts.
  const int64_t bound = 3 * 16 * kMiB;
  expect_refused("split()", "{{ ('a ' * 3145728).split() | length }}", small_limits(), kBudget, bound);
  expect_refused("split(sep)", "{{ ('a,' * 3145728).split(',') | length }}", small_limits(), kBudget, bound);
  expect_refused("string to list of characters", "{{ ('abc' * 2000000) | list | length }}", small_limits(), kBudget,
                 bound);
  expect_refused("for over characters", "{% for c in 'x' * 4000000 %}{% endfor %}", small_limits(), kBudget, bound);
}

TEST(HostileTemplateMemory, CopiesOfABigStringAreCounted) {
  const int64_t bound = 3 * 16 * kMiB;
  const std::string big = "{% set big = 'x' * 1048576 %}";
  expect_refused("append in a loop",
                 big +
                     "{% set l = [] %}{% for i in range(100000) %}{% set _ = l.append(big) %}"
                     "{% endfor %}{{ l | length }}",
                 small_limits(), kBudget, bound);
  expect_refused("insert in a loop",
                 big +
                     "{% set l = [] %}{% for i in range(100000) %}{% set _ = l.insert(0, big) %}"
                     "{% endfor %}",
                 small_limits(), kBudget, bound);
  expect_refused("list literal of copies", big + "{{ [" + repeated("big, ", 200) + "big] | length }}", small_limits(),
                 kBudget, bound);
  expect_refused("dict copies",
                 big +
                     "{% set d = {'k': big} %}{% set l = [] %}{% for i in range(100000) %}"
                     "{% set _ = l.append(d.copy()) %}{% endfor %}",
                 small_limits(), kBudget, bound);
  expect_refused("dict() of a dict",
                 big +
                     "{% set d = {'k': big} %}{% set l = [] %}{% for i in range(100000) %}"
                     "{% set _ = l.append(dict(d)) %}{% endfor %}",
                 small_limits(), kBudget, bound);
  expect_refused("concatenation kept in a list",
                 big +
                     "{% set l = [] %}{% for i in range(100000) %}"
                     "{% set _ = l.append(big ~ i) %}{% endfor %}",
                 small_limits(), kBudget, bound);
  expect_refused("join of copies",
                 big +
                     "{% set l = [] %}{% for i in range(100000) %}"
                     "{% set _ = l.append([big, big] | join) %}{% endfor %}",
                 small_limits(), kBudget, bound);
}

TEST(HostileTemplateMemory, OneHugeStringIsRefused) {
  const int64_t bound = 2 * 16 * kMiB;
  // Each would be gigabytes; the single-string limit or the budget stops it first.
  for (const auto& [name, src] : std::vector<std::pair<std::string, std::string>>{
           {"str * n", "{{ ('x' * 1000000000) | length }}"},
           {"indent by a long string", "{{ ('\\n' * 100000) | indent('y' * 100000) | length }}"},
           {"replace by a long string", "{{ ('x' * 100000).replace('x', 'y' * 100000) | length }}"},
           {"format", "{{ '{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}'.format('y' * 1000000) | length }}"},
       }) {
    SCOPED_TRACE(name);
    const Outcome o = run(src, small_limits());
    EXPECT_TRUE(o.error.find("limit") != std::string::npos || o.error.find(kBudget) != std::string::npos)
        << "error: '" << o.error << "'";
    EXPECT_LE(o.peak_bytes, bound);
  }
}

TEST(HostileTemplateMemory, RealTemplatesStayFarUnderTheDefaultBudget) {
  // A long conversation, rendered the way chat templates do: concatenations, joins, lists of
  // messages. It must render: the budget is not a limit that real use reaches.
  std::string src =
      "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m.role == 'system' %}"
      "{% set ns.sys = ns.sys + '\\n\\n' + m.content %}{% endif %}{% endfor %}{{ ns.sys | length }}|"
      "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content }}{% endfor %}";
  J messages = J::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 50 == 0 ? "system" : "user"}, {"content", std::string(1000, 'a' + i % 26)}});
  const Outcome o = run(src, TemplateLimits{}, J{{"messages", messages}});
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.output.substr(0, o.output.find('|')), std::to_string(40 * 1002));
}

// ---- parser depth ---------------------------------------------------------------------------------

constexpr const char* kDeep = "nested too deeply";

// Each is 100,000 levels: as a recursive tree it would overflow the stack while being evaluated or
// destroyed, so the parser must refuse it, without recursing that deep itself.
TEST(HostileTemplateDepth, LongChainsAreRefusedWithAClearError) {
  const int n = 100000;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"chained filters", "{{ 'a'" + repeated("|string", n) + " }}"},
      {"chained filters with arguments", "{{ 'a'" + repeated("|replace('a','b')", n) + " }}"},
      {"filter block chain", "{% filter upper" + repeated("|lower", n) + " %}x{% endfilter %}"},
      {"+ chain", "{{ 1" + repeated("+1", n) + " }}"},
      {"~ chain", "{{ 'a'" + repeated("~'a'", n) + " }}"},
      {"* chain", "{{ 1" + repeated("*1", n) + " }}"},
      {"** chain", "{{ 1" + repeated("**1", n) + " }}"},
      {"and chain", "{{ true" + repeated(" and true", n) + " }}"},
      {"or chain", "{{ false" + repeated(" or false", n) + " }}"},
      {"attribute chain", "{{ x" + repeated(".y", n) + " }}"},
      {"subscript chain", "{{ x" + repeated("[0]", n) + " }}"},
      {"slice chain", "{{ x" + repeated("[1:]", n) + " }}"},
      {"call chain", "{{ x" + repeated("()", n) + " }}"},
      {"test chain", "{{ x" + repeated(" is defined()", n) + " }}"},
      {"conditional chain", "{{ 1" + repeated(" if true", n) + " }}"},
      {"nested lists", "{{ " + repeated("[", n) + repeated("]", n) + " }}"},
      {"nested parentheses", "{{ " + repeated("(", n) + "1" + repeated(")", n) + " }}"},
      {"not chain", "{{ " + repeated("not ", n) + "true }}"},
      {"unary minus chain", "{{ " + repeated("-", n) + "1 }}"},
      {"elif chain", "{% if false %}" + repeated("{% elif false %}", n) + "{% endif %}"},
      {"nested ifs", repeated("{% if true %}", n) + repeated("{% endif %}", n)},
      {"nested for", repeated("{% for i in [1] %}", n) + repeated("{% endfor %}", n)},
  };
  for (const auto& [name, src] : cases) {
    SCOPED_TRACE(name);
    const Outcome o = run(src, TemplateLimits{}, J{{"x", J::array()}});
    EXPECT_NE(o.error.find(kDeep), std::string::npos) << "error: '" << o.error.substr(0, 300) << "'";
  }
}

TEST(HostileTemplateDepth, ChainsOfRealisticLengthStillRender) {
  // The limit is far above what templates write: 150 filters, a 150-term sum and 100 elifs render.
  EXPECT_EQ(run("{{ 'a'" + repeated("|upper|lower", 75) + " }}", TemplateLimits{}).output, "a");
  EXPECT_EQ(run("{{ 0" + repeated("+1", 150) + " }}", TemplateLimits{}).output, "150");
  EXPECT_EQ(
      run("{% if false %}" + repeated("{% elif false %}", 100) + "{% else %}ok{% endif %}", TemplateLimits{}).output,
      "ok");
  EXPECT_EQ(run("{{ x" + repeated("[0]", 50) + " }}", TemplateLimits{},
                J{{"x", J::parse(repeated("[", 50) + "7" + repeated("]", 50))}})
                .output,
            "7");
}

TEST(HostileTemplateDepth, TheLimitFollowsMaxDepth) {
  TemplateLimits tight;
  tight.max_depth = 10;  // the parser allows 3x: 30 levels
  EXPECT_NE(run("{{ 1" + repeated("+1", 40) + " }}", tight).error.find(kDeep), std::string::npos);
  EXPECT_EQ(run("{{ 1" + repeated("+1", 20) + " }}", tight).output, "21");
}

}  // namespace
}  // namespace tessera::text
