// The scaled weight formats (ops/ref/scaled.h): the E4M3 / E2M1 codecs, the quantisers, and
// the CPU matmul over NVFP4 and FP8 weights (exactness: one order per element whatever T or
// the thread count, and factor(n) · (the F32 matmul of the inner values) bit for bit).
// tests/golden/test_scaled.cpp checks all of it against tools/make_scaled_fixtures.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "ops/ref/ref_ops.h"
#include "ops/ref/scaled.h"
#include "ops_test_util.h"

namespace basalt {
namespace {

using test::randn;

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const float v = fp8_e4m3_to_f32(uint8_t(c));
    EXPECT_EQ(f32_to_fp8_e4m3(v), uint8_t(c)) << "code " << c << " value " << v;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::nanf("")), 0x7f);
}

TEST(Fp8E4M3, TiesToEvenAndSaturation) {
  // Every midpoint between neighbouring positive codes goes to the even code; a hair above goes
  // up, a hair below goes down.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = fp8_e4m3_to_f32(uint8_t(c)), hi = fp8_e4m3_to_f32(uint8_t(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact: both have few bits
    EXPECT_EQ(f32_to_fp8_e4m3(mid), uint8_t(c % 2 ? c + 1 : c)) << "between codes " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)), uint8_t(c + 1));
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), uint8_t(c));
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), uint8_t((c % 2 ? c + 1 : c) | 0x80));
  }
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-500.0f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: ties to 0
  EXPECT_EQ(f32_to_fp8_e4m3(-1e-9f), 0x80);
}

TEST(Fp4E2M1, CodesTiesAndSaturation) {
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(fp4_e2m1_to_f32(uint8_t(c)), c & 8 ? -mags[c & 7] : mags[c & 7]);
    if (c != 8) {
      EXPECT_EQ(f32_to_fp4_e2m1(fp4_e2m1_to_f32(uint8_t(c))), c);
    }
  }
  // Midpoints: to the even code.
  const std::pair<float, int> ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
                                        {2.5f, 4},  {3.5f, 6},  {5.0f, 6}};
  for (auto [x, c] : ties) {
    EXPECT_EQ(f32_to_fp4_e2m1(x), c) << x;
    EXPECT_EQ(f32_to_fp4_e2m1(-x), c | 8) << -x;
  }
  EXPECT_EQ(f32_to_fp4_e2m1(0.2500001f), 1);
  EXPECT_EQ(f32_to_fp4_e2m1(100.0f), 7);
  EXPECT_EQ(f32_to_fp4_e2m1(-0.1f), 8);  // "-0", as ModelOpt writes it
}

TEST(Nvfp4, NibbleOrderAndExactValues) {
  // amax 6 → g = 6/2688; each group's scale e4m3(amax_g / (6 g)) = 448 for the first group.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f, x[1] = -6.0f, x[2] = 3.0f;
  std::vector<uint8_t> q(16), S(2);
  float g;
  ref::quantize_nvfp4(x.data(), 1, 32, q.data(), S.data(), &g);
  EXPECT_EQ(g, 6.0f / 2688.0f);
  EXPECT_EQ(S[0], f32_to_fp8_e4m3(448.0f));
  EXPECT_EQ(q[0], 0x2 | 0xf << 4);  // element 0 (1.0 = code 2) in the low nibble
  EXPECT_EQ(q[1], 0x5);             // 3.0 = code 5; element 3 is 0
  WeightRef w{DType::NVFP4, 1, 32, q.data()};
  w.scales = S.data(), w.scale = g;
  std::vector<float> row(32);
  ref::scaled_dequant_row(w, 0, row.data());
  EXPECT_NEAR(row[0], 1.0f, 1e-6f);
  EXPECT_NEAR(row[1], -6.0f, 1e-6f);
  EXPECT_NEAR(row[2], 3.0f, 1e-6f);
}

// Quantise → dequantise error: NVFP4 within half a step of the group's grid (plus the scale's
// own E4M3 rounding), FP8 within half an E4M3 step.
TEST(Scaled, QuantiseErrorBounds) {
  const int64_t N = 37, K = 160;
  const auto x = randn(size_t(N * K), 7);
  {
    std::vector<uint8_t> q(size_t(N * K / 2)), S(size_t(N * K / 16));
    float g;
    ref::quantize_nvfp4(x.data(), N, K, q.data(), S.data(), &g);
    WeightRef w{DType::NVFP4, N, K, q.data()};
    w.scales = S.data(), w.scale = g;
    std::vector<float> row(static_cast<size_t>(K));
    double se = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n) {
      ref::scaled_dequant_row(w, n, row.data());
      for (int64_t k = 0; k < K; ++k) {
        const float s = fp8_e4m3_to_f32(S[size_t(n * K / 16 + k / 16)]) * g;
        const float e = std::fabs(row[size_t(k)] - x[size_t(n * K + k)]);
        ASSERT_LE(e, 1.0f * s + 1e-6f) << n << "," << k;  // ≤ half the widest step (2 · s)
        se += double(e) * e, ss += double(x[size_t(n * K + k)]) * x[size_t(n * K + k)];
      }
    }
    EXPECT_LT(std::sqrt(se / ss), 0.12);  // ~0.09 of the RMS on normal data
  }
  for (int block : {0, 128}) {
    std::vector<uint8_t> q(size_t(N * K));
    std::vector<float> s(block ? 2 : 1);
    WeightRef w{DType::F8_E4M3, N, K, q.data()};
    if (block) {
      ref::quantize_fp8_block(x.data(), N, K, block, q.data(), s.data());
      w.scales = s.data(), w.scale_block = block;
    } else {
      ref::quantize_fp8_tensor(x.data(), N * K, q.data(), s.data());
      w.scale = s[0];
    }
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      ref::scaled_dequant_row(w, n, row.data());
      for (int64_t k = 0; k < K; ++k) {
        const float v = x[size_t(n * K + k)];
        ASSERT_LE(std::fabs(row[size_t(k)] - v), std::fabs(v) / 16 + 1e-3f * s[0])
            << "block " << block << " " << n << "," << k;
      }
    }
  }
}

// A scaled test weight with its storage.
struct ScaledWeight {
  std::vector<uint8_t> q, S;
  std::vector<float> s;
  WeightRef ref;
  // kind: 0 NVFP4, 1 FP8 per tensor, 2 FP8 per row, 3 FP8 blocks of 64 (partial edges)
  ScaledWeight(int kind, int64_t N, int64_t K, uint32_t seed) {
    const auto x = randn(size_t(N * K), seed, 0.5f);
    ref = WeightRef{kind == 0 ? DType::NVFP4 : DType::F8_E4M3, N, K, nullptr};
    if (kind == 0) {
      q.resize(size_t(N * K / 2)), S.resize(size_t(N * K / 16));
      ref::quantize_nvfp4(x.data(), N, K, q.data(), S.data(), &ref.scale);
      ref.scales = S.data();
    } else {
      q.resize(size_t(N * K));
      if (kind == 3) {
        s.resize(size_t(((N + 63) / 64) * ((K + 63) / 64)));
        ref::quantize_fp8_block(x.data(), N, K, 64, q.data(), s.data());
        ref.scales = s.data(), ref.scale_block = 64, ref.scale = 1.5f;
      } else {
        float t;
        ref::quantize_fp8_tensor(x.data(), N * K, q.data(), &t);
        ref.scale = t;
        if (kind == 2) {
          s = randn(size_t(N), seed + 1, 0.25f);
          for (float& v : s) v = 0.5f + std::fabs(v);
          ref.scales = s.data();
        }
      }
    }
    ref.data = q.data();
  }
};

TEST(ScaledMatmul, CpuIsFactorTimesInnerMatmulAndIndependentOfT) {
  auto be1 = cpu::make_cpu_backend(1), be2 = cpu::make_cpu_backend(2);
  const int64_t T = 11;
  for (int kind = 0; kind < 4; ++kind)
    for (auto [N, K] : {std::pair<int64_t, int64_t>{37, 160}, {5, 16}, {70, 272}}) {
      SCOPED_TRACE(testing::Message() << "kind " << kind << " N " << N << " K " << K);
      ScaledWeight w(kind, N, K, uint32_t(10 + kind));
      const auto x = randn(size_t(T * K), 3);
      std::vector<float> all(size_t(T * N)), all1(size_t(T * N)), one(static_cast<size_t>(N));
      be2->matmul(x.data(), T, w.ref, all.data());
      be1->matmul(x.data(), T, w.ref, all1.data());
      EXPECT_EQ(0, std::memcmp(all.data(), all1.data(), all.size() * 4));
      for (int64_t t = 0; t < T; ++t) {
        be2->matmul(x.data() + t * K, 1, w.ref, one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * N, size_t(N) * 4)) << "row " << t;
      }
      // The split: factor(n) · (F32 matmul of the inner values), bit for bit.
      std::vector<float> inner(size_t(N * K)), y(size_t(T * N));
      for (int64_t n = 0; n < N; ++n) ref::scaled_inner_row(w.ref, n, inner.data() + n * K);
      be2->matmul(x.data(), T, WeightRef{DType::F32, N, K, inner.data()}, y.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          const float want = ref::scaled_factor(w.ref, n) * y[size_t(t * N + n)];
          ASSERT_EQ(all[size_t(t * N + n)], want) << t << "," << n;
        }
      // And close to the scalar reference (a different summation order).
      std::vector<float> r(size_t(T * N));
      ref::matmul(x.data(), T, w.ref, r.data());
      EXPECT_TRUE(test::matmul_within_bound(x, T, w.ref, all, r, 2e-6));
    }
}

// Every finite E4M3 code and every E2M1 code through the CPU kernels' in-register decoders:
// one-hot rows of x pick single weights out.
TEST(ScaledMatmul, CpuDecodesEveryCode) {
  auto be = cpu::make_cpu_backend(1);
  std::vector<uint8_t> q;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7f) != 0x7f) q.push_back(uint8_t(c));
  const int64_t K = int64_t(q.size());  // 254: vector steps and a scalar tail
  std::vector<float> x(size_t(K * K), 0.0f), y(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) x[size_t(k * K + k)] = 1.0f;
  WeightRef w{DType::F8_E4M3, 1, K, q.data()};
  be->matmul(x.data(), K, w, y.data());
  for (int64_t k = 0; k < K; ++k) ASSERT_EQ(y[size_t(k)], fp8_e4m3_to_f32(q[size_t(k)])) << k;

  const int64_t K4 = 64;  // codes 0..15 four times, four groups with different scales
  std::vector<uint8_t> p(size_t(K4 / 2)), S = {0x38, 0x01, 0x7e, 0x41};
  for (int64_t k = 0; k < K4; k += 2) p[size_t(k / 2)] = uint8_t((k % 16) | ((k + 1) % 16) << 4);
  std::vector<float> x4(size_t(K4 * K4), 0.0f), y4(static_cast<size_t>(K4));
  for (int64_t k = 0; k < K4; ++k) x4[size_t(k * K4 + k)] = 1.0f;
  WeightRef w4{DType::NVFP4, 1, K4, p.data()};
  w4.scales = S.data();
  be->matmul(x4.data(), K4, w4, y4.data());
  for (int64_t k = 0; k < K4; ++k)
    ASSERT_EQ(y4[size_t(k)], fp4_e2m1_to_f32(uint8_t(k % 16)) * fp8_e4m3_to_f32(S[size_t(k / 16)]))
        << k;
}

}  // namespace
}  // namespace basalt
