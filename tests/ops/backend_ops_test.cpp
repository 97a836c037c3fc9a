// Backend conformance (the llama.cpp test-backend-ops idea): every case of the table in
// op_cases.h runs on the CPU backend (the fp32 reference) and on the backend under test, and the
// outputs must agree within the case's relative-RMS tolerance. The CUDA backend runs each case once
// per kernel its plan (ops/cuda/kernel_registry.h) can run for the case's shapes on this GPU, plus
// the plan's own choice. Without a CUDA build or a GPU those comparisons skip (a failure under
// TESSERA_REQUIRE_GPU=1) and only the harness's sanity check runs: the CPU backend against itself,
// which must agree bit for bit.
//
// Every comparison prints one line ("[ conf ] op [family] shape / kernel / output: rel-RMS x (max y)"),
// so a run on a GPU machine shows the margins as well as the failures.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ops/conformance/op_cases.h"
#include "ops/cpu/cpu_ops.h"
#include "support/require_gpu.h"

#ifdef TESSERA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/tools/case_variants.h"
#endif

namespace tessera {
namespace {

namespace oc = ops::conformance;

const std::vector<oc::OpCase>& cases() {
  static const std::vector<oc::OpCase> v = oc::op_cases();
  return v;
}

std::vector<oc::CaseOutput> run_case(const oc::OpCase& c, const oc::Target& t) {
  oc::BoundCase b = c.setup(t);
  b.run();
  return b.read();
}

// Checks `got` against the reference `want`, one line printed per output.
void expect_matches(const oc::OpCase& c, const std::string& backend, const std::string& kernel,
                    const std::vector<oc::CaseOutput>& got, const std::vector<oc::CaseOutput>& want,
                    bool bit_exact = false) {
  const std::string where = fmt::format("{} [{}] {} / {} kernel {}", c.op, c.family, c.shape_name, backend, kernel);
  ASSERT_EQ(got.size(), want.size()) << where << ": outputs";
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = bit_exact ? 0.0 : want[i].max_rel_rms >= 0 ? want[i].max_rel_rms : c.tolerance(kernel);
    const oc::Comparison cmp = oc::compare(got[i].values, want[i].values);
    const bool ok = cmp.mismatched == 0 && cmp.rel_rms <= tol;
    fmt::print("[ conf ] {} / {}: rel-RMS {:.3g} (max {:.3g}){}\n", where, want[i].name, cmp.rel_rms, tol,
               ok ? "" : "  FAILED");
    if (ok) continue;
    // Where the values part: how many, and the first of them.
    int64_t differ = 0, first = -1;
    for (size_t j = 0; j < std::min(got[i].values.size(), want[i].values.size()); ++j) {
      const float a = got[i].values[j], b = want[i].values[j];
      if (a == b || (std::isnan(a) && std::isnan(b))) continue;
      if (first < 0) first = static_cast<int64_t>(j);
      ++differ;
    }
    std::string detail = fmt::format("{} of {} values differ", differ, want[i].values.size());
    if (first >= 0)
      detail += fmt::format(" (first at {}: got {}, want {})", first, got[i].values[first], want[i].values[first]);
    if (got[i].values.size() != want[i].values.size())
      detail = fmt::format("{} values, want {}", got[i].values.size(), want[i].values.size());
    ADD_FAILURE() << where << " / output '" << want[i].name << "': rel-RMS " << cmp.rel_rms << " > max " << tol
                  << ", non-finite mismatches " << cmp.mismatched << "; " << detail;
  }
}

// --- The table covers the contract.

// The virtual member functions ops.h declares (comments stripped), by name.
std::set<std::string> virtuals_declared_in_ops_h() {
  std::ifstream in(TESSERA_OPS_HEADER);
  std::stringstream text;
  for (std::string line; std::getline(in, line);) text << line.substr(0, line.find("//")) << '\n';
  std::set<std::string> names;
  const std::string s = text.str();
  const std::regex decl(R"(virtual\s+([^;{}()]*)\()");
  const std::regex last_name(R"((\w+)\s*$)");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), decl); it != std::sregex_iterator(); ++it) {
    const std::string head = (*it)[1];
    std::smatch m;
    if (head.find('~') == std::string::npos && std::regex_search(head, m, last_name)) names.insert(m[1]);
  }
  return names;
}

// A virtual added to ops.h without a name in ops_virtuals() fails here, and one in ops_virtuals()
// without a case fails EveryVirtualHasACase: so a new op cannot land untested. (A compile-time count
// would need a constant that whoever adds the virtual must remember to bump; reading ops.h itself
// needs no one to remember.)
TEST(BackendOpsTable, ListsEveryVirtualOfOpsH) {
  const std::set<std::string> declared = virtuals_declared_in_ops_h();
  ASSERT_GE(declared.size(), 20u) << "could not read the virtuals of " << TESSERA_OPS_HEADER;
  const std::set<std::string> listed(oc::ops_virtuals().begin(), oc::ops_virtuals().end());
  EXPECT_EQ(listed.size(), oc::ops_virtuals().size()) << "ops_virtuals() names a virtual twice";
  for (const auto& n : declared)
    EXPECT_TRUE(listed.count(n)) << "ops.h declares virtual " << n
                                 << ", which op_cases.cpp's ops_virtuals() does not list (add it and its cases)";
  for (const auto& n : listed)
    EXPECT_TRUE(declared.count(n)) << "ops_virtuals() lists " << n << ", which ops.h does not declare virtual";
}

TEST(BackendOpsTable, EveryVirtualHasACase) {
  std::map<std::string, int> per_op;
  for (const auto& c : cases()) ++per_op[c.op];
  for (const auto& n : oc::ops_virtuals()) EXPECT_GE(per_op[n], 1) << "no case exercises Ops::" << n;
  const std::set<std::string> listed(oc::ops_virtuals().begin(), oc::ops_virtuals().end());
  for (const auto& [op, n] : per_op)
    EXPECT_TRUE(listed.count(op)) << n << " cases name op '" << op << "', not a virtual";
}

TEST(BackendOpsTable, CasesAreWellFormedAndEachFamilyHasSome) {
  std::set<std::string> ids;
  std::map<std::string, int> per_family;
  for (const auto& c : cases()) {
    EXPECT_TRUE(ids.insert(c.id()).second) << "duplicate case " << c.id();
    EXPECT_TRUE(static_cast<bool>(c.setup)) << c.id();
    EXPECT_GE(c.max_rel_rms, 0.0) << c.id();
    ++per_family[c.family];
    if (c.kernels == oc::KernelFamily::kMla) {
      EXPECT_GT(c.mla.heads, 0) << c.id();
    }
    if (c.kernels == oc::KernelFamily::kMoe) {
      EXPECT_GT(c.moe.experts, 0) << c.id();
    }
  }
  for (const auto& f : oc::shape_families()) EXPECT_GT(per_family[f], 0) << f;
  // Selecting families gives exactly their cases, in table order.
  const auto tiny = oc::op_cases({"tiny"});
  EXPECT_EQ(static_cast<int>(tiny.size()), per_family["tiny"]);
  for (const auto& c : tiny) EXPECT_EQ(c.family, "tiny");
  EXPECT_ANY_THROW(oc::op_cases({"no-such-family"}));
}

// The measure itself: relative RMS over finite references, non-finite ones matched exactly.
TEST(BackendOpsTable, CompareMeasuresRelativeRms) {
  EXPECT_EQ(oc::compare({1, 2, 3}, {1, 2, 3}).rel_rms, 0.0);
  EXPECT_NEAR(oc::compare({1.1f, 0}, {1, 0}).rel_rms, 0.1, 1e-6);
  EXPECT_EQ(oc::compare({0, 0}, {0, 0}).rel_rms, 0.0);
  EXPECT_TRUE(std::isinf(oc::compare({1, 0}, {0, 0}).rel_rms));
  EXPECT_EQ(oc::compare({-INFINITY, 2}, {-INFINITY, 2}).mismatched, 0);
  EXPECT_EQ(oc::compare({0, 2}, {-INFINITY, 2}).mismatched, 1);
  EXPECT_EQ(oc::compare({1}, {1, 2}).mismatched, 2);
}

// The case count of each op and shape family (printed: what the table covers).
TEST(BackendOpsTable, PrintsCaseCountsPerOpAndFamily) {
  std::map<std::string, std::map<std::string, int>> n;
  for (const auto& c : cases()) ++n[c.op][c.family];
  std::string table = fmt::format("{:<20}", "op");
  for (const auto& f : oc::shape_families()) table += fmt::format(" {:>12}", f);
  table += "\n";
  for (const auto& op : oc::ops_virtuals()) {
    table += fmt::format("{:<20}", op);
    for (const auto& f : oc::shape_families()) table += fmt::format(" {:>12}", n[op][f]);
    table += "\n";
  }
  fmt::print("{}{} cases\n", table, cases().size());
}

// --- Each case.

class BackendOpsCase : public ::testing::TestWithParam<size_t> {};

// The harness's sanity check, in any build: two CPU backends given the same case must agree bit for
// bit (the reference is deterministic), so a case whose setup or read is not a function of its
// seed, or a comparison that compares the wrong things, shows here.
TEST_P(BackendOpsCase, CpuAgainstItself) {
  const oc::OpCase& c = cases()[GetParam()];
  ops::cpu::CpuOps a, b;
  const auto want = run_case(c, oc::host_target(a));
  const auto got = run_case(c, oc::host_target(b));
  expect_matches(c, "cpu", "reference", got, want, /*bit_exact=*/true);
}

TEST_P(BackendOpsCase, CudaAgainstCpu) {
#ifndef TESSERA_HAVE_CUDA
  TESSERA_SKIP_UNLESS_REQUIRED("CPU-only build: no CUDA backend to compare");
#else
  if (!ops::cuda::cuda_available()) TESSERA_SKIP_UNLESS_REQUIRED("no CUDA device");
  const oc::OpCase& c = cases()[GetParam()];
  const auto caps = ops::cuda::query_device_caps();
  std::vector<std::string> skipped;
  const std::vector<ops::cuda::CaseVariant> variants = ops::cuda::case_variants(c, caps, skipped);
  for (const auto& s : skipped)
    fmt::print("[ conf ] {} [{}] {}: kernel {} skipped (plan row unavailable)\n", c.op, c.family, c.shape_name, s);
  ASSERT_FALSE(variants.empty()) << c.id() << ": no kernel of the plan can run it on " << caps.name;
  ops::cpu::CpuOps cpu;
  const auto want = run_case(c, oc::host_target(cpu));
  for (const ops::cuda::CaseVariant& v : variants) {
    try {
      auto gpu = ops::cuda::make_cuda_ops(v.spec);
      expect_matches(c, "cuda", v.label, run_case(c, ops::cuda::cuda_target(*gpu)), want);
    } catch (const std::exception& e) {
      // A device error is sticky: the later variants fail too, each naming itself.
      ADD_FAILURE() << c.op << " [" << c.family << "] " << c.shape_name << " / cuda kernel " << v.label
                    << ": threw: " << e.what();
    }
  }
#endif
}

// gtest names: the case id in letters, digits and underscores (unique: a collision gets a suffix).
const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    std::set<std::string> seen;
    for (const auto& c : cases()) {
      std::string n;
      for (char ch : c.id()) {
        const bool word = std::isalnum(static_cast<unsigned char>(ch));
        if (word)
          n += ch;
        else if (!n.empty() && n.back() != '_')
          n += '_';
      }
      while (!n.empty() && n.back() == '_') n.pop_back();
      std::string unique = n;
      for (int i = 2; !seen.insert(unique).second; ++i) unique = fmt::format("{}_{}", n, i);
      v.push_back(unique);
    }
    return v;
  }();
  return names;
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOpsCase, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return case_names()[info.param]; });

}  // namespace
}  // namespace tessera
