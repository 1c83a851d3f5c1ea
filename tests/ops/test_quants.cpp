// GGUF block types (Q4_0, Q4_K, Q5_K, Q6_K; Q8_0 alongside):
//  - the reference dequantisation (ops/ref/quants.cpp) against gguf-py's independent numpy
//    dequantizers, bit for bit, on random-but-valid blocks (tests/golden/quants, written by
//    tools/make_quant_fixtures.py);
//  - f32 activations (make_cpu_backend(n, false)): the CPU kernels' in-register decoding
//    against the same values, bit for bit (a matmul with one-hot activations reads single
//    weights back exactly), and the CPU matmul against ref::matmul on random blocks and awkward
//    T and N. Tolerance: |got - want| <= 1e-6 * sum_k |x_k * w_k|. Both sides see identical
//    f32 weights, so the only difference is summation order (the kernel's two-accumulator
//    vector schedule vs the reference's serial sum); measured errors are ~1e-7 of that;
//  - 8-bit activations (the default, ops/ref/qdot.h): the CPU kernels against ref::matmul_q8
//    bit for bit on every SIMD target, and ref::matmul_q8 against the f32 product within the
//    activation rounding (half a quantisation step per element, times |w|);
//  - the exactness contract: rows bitwise independent of T and of the thread count.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_hwy.h"
#include "core/dtype.h"
#include "io/gguf.h"
#include "io/npy.h"
#include "ops/ref/qdot.h"
#include "ops/ref/quants.h"
#include "ops/ref/ref_ops.h"
#include "ops_test_util.h"
#include "test_util.h"

namespace basalt {
namespace {

constexpr DType kQuantTypes[] = {DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0};

// Byte offsets of the f16 scale fields in one block.
std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q6_K:
      return {208};
    default:
      return {0};
  }
}

// Random blocks of an [N, K] weight: every byte random, f16 scales sane (never zero/inf/NaN).
struct QuantWeight {
  std::vector<uint8_t> bytes;
  WeightRef ref;
  QuantWeight(DType t, int64_t N, int64_t K, uint32_t seed) {
    const int64_t n_blocks = N * K / dtype_block_elems(t);
    const int bb = dtype_block_bytes(t);
    bytes.resize(size_t(n_blocks * bb));
    std::mt19937 rng(seed);
    for (auto& b : bytes) b = uint8_t(rng());
    std::uniform_real_distribution<float> e(-8.0f, -4.0f);
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int off : f16_fields(t)) {
        const float v = std::exp2(e(rng)) * (rng() % 4 == 0 ? -1.0f : 1.0f);
        const uint16_t h = f32_to_f16(v);
        std::memcpy(bytes.data() + b * bb + off, &h, 2);
      }
    ref = {t, N, K, bytes.data()};
  }
};

using test::randn;

TEST(Quants, BlockSizes) {
  EXPECT_EQ(dtype_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(dtype_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(dtype_bytes(DType::Q5_K, 256), 176u);
  EXPECT_EQ(dtype_bytes(DType::Q6_K, 768), 630u);
  EXPECT_THROW(dtype_bytes(DType::Q6_K, 128), Error);
  for (DType t : kQuantTypes) EXPECT_TRUE(dtype_is_float(t)) << dtype_name(t);
}

// Golden: basalt's GGUF reader + ref dequantisation == gguf-py, bitwise; the CPU kernel's
// in-register decoding == gguf-py, bitwise (y = I · Wᵀ reads every weight back exactly).
class QuantGolden : public ::testing::TestWithParam<DType> {};

TEST_P(QuantGolden, RefAndKernelMatchGgufPy) {
  const DType t = GetParam();
  const std::string base =
      test::source_dir() + "/tests/golden/quants/" + std::string(dtype_name(t));
  io::GgufFile g = io::gguf_load_file(base + ".gguf");
  const TensorView& tv = g.tensors.get("w");
  ASSERT_EQ(tv.dtype, t);
  ASSERT_EQ(tv.shape.size(), 2u);
  const int64_t N = tv.shape[0], K = tv.shape[1];
  const io::NpyArray want = io::npy_read(base + ".npy");
  ASSERT_EQ(want.shape, (std::vector<int64_t>{N, K}));
  const WeightRef w{t, N, K, tv.data};

  std::vector<float> row(static_cast<size_t>(K));
  int64_t nonzero = 0;
  for (int64_t n = 0; n < N; ++n) {
    ref::weight_row_f32(w, n, row.data());
    for (int64_t k = 0; k < K; ++k) {
      const float a = row[size_t(k)], b = want.data[size_t(n * K + k)];
      ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b))
          << dtype_name(t) << " n=" << n << " k=" << k << ": " << a << " vs " << b;
      nonzero += a != 0.0f;
    }
  }
  EXPECT_GT(nonzero, N * K / 2);

  std::vector<float> eye(size_t(K * K), 0.0f), y(size_t(K * N), NAN);
  for (int64_t k = 0; k < K; ++k) eye[size_t(k * K + k)] = 1.0f;
  cpu::make_cpu_backend(2, false)->matmul(eye.data(), K, w, y.data());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(y[size_t(k * N + n)], want.data[size_t(n * K + k)])  // ±0 compare equal
          << dtype_name(t) << " kernel n=" << n << " k=" << k;

  // 8-bit activations over the same blocks: the kernel is the reference, bit for bit.
  const auto x = randn(size_t(5 * K), 31);
  std::vector<float> r(size_t(5 * N)), c(size_t(5 * N), NAN);
  ref::matmul_q8(x.data(), 5, w, r.data());
  cpu::make_cpu_backend(2)->matmul(x.data(), 5, w, c.data());
  EXPECT_EQ(0, std::memcmp(r.data(), c.data(), r.size() * 4)) << dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantGolden, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

struct QuantShape {
  DType dtype;
  int64_t T, N, K;
};

class QuantMatmulVsRef : public ::testing::TestWithParam<QuantShape> {};

TEST_P(QuantMatmulVsRef, MatchesReference) {
  const auto [dt, T, N, K] = GetParam();
  const auto x = randn(size_t(T * K), 11);
  QuantWeight w(dt, N, K, 12);
  std::vector<float> want(size_t(T * N)), got(size_t(T * N), NAN);
  ref::matmul(x.data(), T, w.ref, want.data());
  cpu::make_cpu_backend(2, false)->matmul(x.data(), T, w.ref, got.data());
  EXPECT_TRUE(test::matmul_within_bound(x, T, w.ref, got, want, 1e-6)) << dtype_name(dt);

  std::vector<float> want8(size_t(T * N)), got8(size_t(T * N), NAN);
  ref::matmul_q8(x.data(), T, w.ref, want8.data());
  cpu::make_cpu_backend(2)->matmul(x.data(), T, w.ref, got8.data());
  EXPECT_EQ(0, std::memcmp(want8.data(), got8.data(), want8.size() * 4)) << dtype_name(dt);
}

// ref::matmul_q8 against the f32 product of the same dequantised weights: each activation is
// off by at most half its group's step d / 2, so |y8 − y| ≤ Σ_k |w_k| · d(k) / 2, plus float
// rounding (1e-5 · Σ |x · w|).
TEST_P(QuantMatmulVsRef, EightBitActivationsWithinTheirRounding) {
  const auto [dt, T, N, K] = GetParam();
  const auto x = randn(size_t(T * K), 13);
  QuantWeight w(dt, N, K, 14);
  std::vector<float> y(size_t(T * N)), y8(size_t(T * N));
  ref::matmul(x.data(), T, w.ref, y.data());
  ref::matmul_q8(x.data(), T, w.ref, y8.data());
  const int64_t G = ref::q8_group(dt);
  std::vector<float> row(static_cast<size_t>(K));
  double worst = 0;
  for (int64_t n = 0; n < N; ++n) {
    ref::weight_row_f32(w.ref, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double bound = 0, mag = 0;
      for (int64_t g = 0; g < K / G; ++g) {
        double amax = 0;
        for (int64_t k = g * G; k < (g + 1) * G; ++k)
          amax = std::max(amax, std::fabs(double(x[size_t(t * K + k)])));
        for (int64_t k = g * G; k < (g + 1) * G; ++k) {
          bound += std::fabs(double(row[size_t(k)])) * amax / 127.0 / 2.0;
          mag += std::fabs(double(row[size_t(k)]) * x[size_t(t * K + k)]);
        }
      }
      const double err = std::fabs(double(y8[size_t(t * N + n)]) - y[size_t(t * N + n)]);
      ASSERT_LE(err, bound + 1e-5 * mag) << dtype_name(dt) << " t=" << t << " n=" << n;
      worst = std::max(worst, err / (bound + 1e-30));
    }
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

// Activations that hit ±127 everywhere against weights with every code (Q8_0's −128
// included): the kernels' 16-bit pair sums must not saturate; zero rows and a NaN propagate
// as in the f32 path.
TEST(QuantMatmulQ8, ExtremesZerosAndNaN) {
  for (DType dt : kQuantTypes) {
    const int64_t T = 5, N = 9, K = 512;
    QuantWeight w(dt, N, K, 41);
    std::vector<float> x(size_t(T * K));
    for (int64_t k = 0; k < K; ++k) {
      x[size_t(k)] = 3.0f;                          // all +127
      x[size_t(K + k)] = k % 3 ? -2.0f : 2.0f;      // ±127
      x[size_t(2 * K + k)] = 0.0f;                  // a zero row
      x[size_t(3 * K + k)] = k % 2 ? 1e30f : -1e30f;  // huge but finite
      x[size_t(4 * K + k)] = float(k % 7) - 3.0f;
    }
    x[size_t(4 * K + 100)] = NAN;
    std::vector<float> r(size_t(T * N)), c(size_t(T * N), 1.0f);
    ref::matmul_q8(x.data(), T, w.ref, r.data());
    cpu::make_cpu_backend(2)->matmul(x.data(), T, w.ref, c.data());
    for (int64_t i = 0; i < 4 * N; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(r[size_t(i)]), std::bit_cast<uint32_t>(c[size_t(i)]))
          << dtype_name(dt) << " " << i;
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(c[size_t(2 * N + n)], 0.0f) << dtype_name(dt);
      EXPECT_TRUE(std::isnan(c[size_t(4 * N + n)])) << dtype_name(dt);
      EXPECT_TRUE(std::isnan(r[size_t(4 * N + n)])) << dtype_name(dt);
    }
  }
}

std::vector<QuantShape> quant_shapes() {
  std::vector<QuantShape> v;
  for (DType t : kQuantTypes)
    for (int64_t T : {1, 3, 7, 16})
      for (int64_t N : {1, 31, 33}) {
        const int64_t K = dtype_block_elems(t) == 32 ? 96 + 32 * (T % 3) : 256 * (1 + T % 3);
        v.push_back({t, T, N, K});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, QuantMatmulVsRef, ::testing::ValuesIn(quant_shapes()),
                         [](const auto& info) {
                           const QuantShape& s = info.param;
                           return std::string(dtype_name(s.dtype)) + "_T" + std::to_string(s.T) +
                                  "_N" + std::to_string(s.N) + "_K" + std::to_string(s.K);
                         });

// The exactness contract at the kernel level, as MatmulExact.RowsIndependentOfTAndThreads.
TEST(QuantMatmulExact, RowsIndependentOfTAndThreads) {
  const int64_t T = 13, N = 37, K = 512;
  for (bool q8 : {true, false})
  for (DType dt : kQuantTypes) {
    auto be1 = cpu::make_cpu_backend(1, q8), be2 = cpu::make_cpu_backend(2, q8);
    const auto x = randn(size_t(T * K), 3);
    QuantWeight w(dt, N, K, 4);
    std::vector<float> all(size_t(T * N)), all1(size_t(T * N)), one(static_cast<size_t>(N));
    be2->matmul(x.data(), T, w.ref, all.data());
    be1->matmul(x.data(), T, w.ref, all1.data());
    EXPECT_EQ(0, std::memcmp(all.data(), all1.data(), all.size() * 4)) << dtype_name(dt);
    for (int64_t t = 0; t < T; ++t) {
      be2->matmul(x.data() + t * K, 1, w.ref, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * N, size_t(N) * 4))
          << dtype_name(dt) << " row " << t;
    }
  }
}

// The vector activation quantiser against ref::quantize_acts_rows on every target: ties
// (x · 127 / amax exactly halfway) round to even in both, a group with a NaN or an infinity goes
// to the reference's rule, zero groups stay zero.
TEST(QuantActs, EveryTargetQuantisesLikeTheReference) {
  struct Reset {
    ~Reset() { hwy::SetSupportedTargetsForTest(0); }
  } reset;
  const int64_t T = 3, K = 512;
  std::vector<float> x = randn(size_t(T * K), 51);
  for (int64_t k = 0; k < 32; ++k) x[size_t(k)] = float(k % 8) - 3.5f;  // halves
  x[31] = 127.0f;                                                        // amax: id = 1
  for (int64_t k = 32; k < 64; ++k) x[size_t(k)] = 0.0f;
  x[size_t(K + 40)] = NAN;
  x[size_t(2 * K + 300)] = INFINITY;
  for (int64_t G : {32, 256}) {
    ref::Q8Acts want, got;
    ref::q8_acts_resize(want, T, K, G);
    ref::q8_acts_resize(got, T, K, G);
    ref::quantize_acts_rows(x.data(), 0, T, want);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      cpu::quantize_acts_rows(x.data(), 0, T, got);
      EXPECT_EQ(want.q, got.q) << hwy::TargetName(target) << " G " << G;
      EXPECT_EQ(want.s16, got.s16) << hwy::TargetName(target) << " G " << G;
      ASSERT_EQ(want.d.size(), got.d.size());
      for (size_t i = 0; i < want.d.size(); ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(want.d[i]), std::bit_cast<uint32_t>(got.d[i]))
            << hwy::TargetName(target) << " G " << G << " group " << i;
    }
    hwy::SetSupportedTargetsForTest(0);
  }
  // The halves of the first group: 127 / 127 = 1, so x itself rounds half to even.
  ref::Q8Acts a;
  ref::q8_acts_resize(a, T, K, 32);
  ref::quantize_acts_rows(x.data(), 0, 1, a);
  EXPECT_EQ(a.q[0], -4);  // -3.5
  EXPECT_EQ(a.q[1], -2);  // -2.5
  EXPECT_EQ(a.q[3], 0);   // -0.5
  EXPECT_EQ(a.q[4], 0);   // 0.5
  EXPECT_EQ(a.q[5], 2);   // 1.5
  EXPECT_EQ(a.d[1], 0.0f);
}

// Every SIMD target compiled in and supported by this CPU (AVX-512: 16 lanes, AVX2: 8,
// SSE4: 4, emulated: 1 or 4 ...) decodes every golden weight bit for bit and matches ref::matmul.
TEST(QuantMatmulTargets, EveryTargetDecodesExactly) {
  struct Reset {
    ~Reset() { hwy::SetSupportedTargetsForTest(0); }
  } reset;
  std::string tried;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    tried += std::string(tried.empty() ? "" : " ") + hwy::TargetName(target);
    ::testing::Test::RecordProperty("targets", tried);
    hwy::SetSupportedTargetsForTest(target);
    ASSERT_STREQ(cpu::simd_target_name(), hwy::TargetName(target));
    auto be = cpu::make_cpu_backend(2, false), be8 = cpu::make_cpu_backend(2);
    for (DType t : kQuantTypes) {
      const std::string base =
          test::source_dir() + "/tests/golden/quants/" + std::string(dtype_name(t));
      io::GgufFile g = io::gguf_load_file(base + ".gguf");
      const TensorView& tv = g.tensors.get("w");
      const int64_t N = tv.shape[0], K = tv.shape[1];
      const io::NpyArray want = io::npy_read(base + ".npy");
      std::vector<float> eye(size_t(K * K), 0.0f), y(size_t(K * N), NAN);
      for (int64_t k = 0; k < K; ++k) eye[size_t(k * K + k)] = 1.0f;
      be->matmul(eye.data(), K, WeightRef{t, N, K, tv.data}, y.data());
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(y[size_t(k * N + n)], want.data[size_t(n * K + k)])
              << hwy::TargetName(target) << " " << dtype_name(t) << " n=" << n << " k=" << k;

      const int64_t T = 13, NN = 33, KK = 512;  // 8-, 4- and 1-row tiles; column pairs and a single
      const auto x = randn(size_t(T * KK), 21);
      QuantWeight w(t, NN, KK, 22);
      std::vector<float> r(size_t(T * NN)), c(size_t(T * NN));
      ref::matmul(x.data(), T, w.ref, r.data());
      be->matmul(x.data(), T, w.ref, c.data());
      std::vector<float> row(static_cast<size_t>(KK));
      for (int64_t n = 0; n < NN; ++n) {
        ref::weight_row_f32(w.ref, n, row.data());
        for (int64_t tt = 0; tt < T; ++tt) {
          double mag = 0;
          for (int64_t k = 0; k < KK; ++k)
            mag += std::fabs(double(x[size_t(tt * KK + k)]) * row[size_t(k)]);
          ASSERT_NEAR(c[size_t(tt * NN + n)], r[size_t(tt * NN + n)], 1e-6 * mag)
              << hwy::TargetName(target) << " " << dtype_name(t);
        }
      }
      ref::matmul_q8(x.data(), T, w.ref, r.data());
      be8->matmul(x.data(), T, w.ref, c.data());
      ASSERT_EQ(0, std::memcmp(r.data(), c.data(), r.size() * 4))
          << hwy::TargetName(target) << " " << dtype_name(t) << " (8-bit activations)";
    }
  }
}

// Bad input: a row that is not whole blocks is refused when the GGUF is parsed.
TEST(Quants, GgufRejectsPartialBlocks) {
  const std::string path = test::source_dir() + "/tests/golden/quants/Q4_K.gguf";
  Blob b = blob_map_file(path);
  std::vector<uint8_t> bytes(b.data, b.data + b.size);
  // The tensor info's first dimension (768) is the only u64 768 in the header: make it 640.
  bool patched = false;
  for (size_t i = 0; i + 8 <= bytes.size() && !patched; ++i) {
    uint64_t v;
    std::memcpy(&v, bytes.data() + i, 8);
    if (v == 768) {
      v = 640;
      std::memcpy(bytes.data() + i, &v, 8);
      patched = true;
    }
  }
  ASSERT_TRUE(patched);
  test::expect_error([&] { io::gguf_parse(blob_from_vector(bytes, "bad.gguf")); },
                     {"tensor 'w' has rows of 640 elements, not a whole number of 256-element "
                      "Q4_K blocks"});
}

}  // namespace
}  // namespace basalt
