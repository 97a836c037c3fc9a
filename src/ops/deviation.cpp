#include "ops/deviation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tessera::ops {

std::string Deviation::describe() const {
  return fmt::format("max relative error {:.3g} at [{}, {}] (got {:.6g}, reference {:.6g})", max_rel, row, col, got,
                     want);
}

Deviation deviation(std::span<const float> got, std::span<const float> want, int64_t cols) {
  TESSERA_CHECK(cols > 0 && got.size() == want.size() && want.size() % static_cast<size_t>(cols) == 0,
                "deviation: {} values against {} in rows of {}", got.size(), want.size(), cols);
  const int64_t rows = static_cast<int64_t>(want.size()) / cols;
  double all_sq = 0;
  int64_t finite = 0;
  for (float w : want)
    if (std::isfinite(w)) all_sq += double(w) * w, ++finite;
  const double floor =
      std::max(1e-6 * std::sqrt(all_sq / std::max<int64_t>(finite, 1)), double(std::numeric_limits<float>::min()));
  Deviation d;
  auto note = [&](double e, int64_t r, int64_t c) {
    if (e > d.max_rel) {
      d.max_rel = e;
      d.row = r, d.col = c;
      d.got = got[static_cast<size_t>(r * cols + c)], d.want = want[static_cast<size_t>(r * cols + c)];
    }
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = want.data() + r * cols;
    const float* g = got.data() + r * cols;
    double sq = 0;
    int64_t n = 0;
    for (int64_t c = 0; c < cols; ++c)
      if (std::isfinite(w[c])) sq += double(w[c]) * w[c], ++n;
    const double row_rms = n > 0 ? std::sqrt(sq / n) : 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(w[c])) {
        const bool same = std::isnan(w[c]) ? std::isnan(g[c]) : g[c] == w[c];
        if (!same) note(std::numeric_limits<double>::infinity(), r, c);
        continue;
      }
      if (!std::isfinite(g[c])) {
        note(std::numeric_limits<double>::infinity(), r, c);
        continue;
      }
      const double scale = std::max({row_rms, double(std::fabs(w[c])), floor});
      note(std::fabs(double(g[c]) - w[c]) / scale, r, c);
    }
  }
  return d;
}

}  // namespace tessera::ops
