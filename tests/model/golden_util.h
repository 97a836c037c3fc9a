// Comparing model outputs with the golden references in shared/fixtures/models.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::test {

// sqrt(mean((a - ref)^2)) / sqrt(mean(ref^2)), as defined in shared/fixtures/README.md.
inline double rel_rms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / a.size()) / std::sqrt(den / a.size());
}

inline int64_t argmax_row(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

}  // namespace tessera::test
