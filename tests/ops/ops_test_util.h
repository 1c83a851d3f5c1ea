// Helpers shared by the kernel tests (tests/ops).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace basalt::test {

// n values of N(0, scale²) from a seeded generator (the same values on every run).
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// got[T, N] against want[T, N] for y = x · Wᵀ: each element within rel · Σ_k |x·w| (the error
// bound of an f32 sum in another order), the first violation reported.
inline ::testing::AssertionResult matmul_within_bound(const std::vector<float>& x, int64_t T,
                                                      const WeightRef& w,
                                                      const std::vector<float>& got,
                                                      const std::vector<float>& want, double rel) {
  const int64_t N = w.rows, K = w.cols;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    ref::weight_row_f32(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k)
        mag += std::fabs(double(x[size_t(t * K + k)]) * row[size_t(k)]);
      const double g = got[size_t(t * N + n)], e = want[size_t(t * N + n)];
      if (!(std::fabs(g - e) <= rel * mag + 1e-30))
        return ::testing::AssertionFailure() << "t=" << t << " n=" << n << ": " << g << " vs " << e
                                             << " (bound " << rel * mag << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace basalt::test
