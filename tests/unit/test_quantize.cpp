// The Q8_0 / Q4_K / Q5_K / Q6_K encoders (ops/ref/quantize.h) against the reference dequantizers
// (ops/ref/quants.h): error bounds on random data, exact round trips of values on the grid.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "ops/ref/quantize.h"
#include "ops/ref/quants.h"
#include "test_util.h"

namespace basalt::ref {
namespace {

std::vector<float> normals(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Relative RMS error of x after encode + decode in t.
double rel_rmse(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_bytes(t, int64_t(x.size())));
  quantize(t, x.data(), int64_t(x.size()), q.data());
  std::vector<float> y(x.size());
  EXPECT_TRUE(dequant_blocks(t, q.data(), int64_t(x.size()) / dtype_block_elems(t), y.data()));
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i)
    se += double(y[i] - x[i]) * (y[i] - x[i]), ss += x[i] * x[i];
  return std::sqrt(se / ss);
}

// Per element: |x − d16·q| ≤ d/2 + 127·|d − d16| (d = amax/127 as encoded, d16 as stored),
// which is ≤ 0.5625·d16 where d16 is a normal f16 (≥ 2^-14; subnormal scales round more: at
// σ = 1e-3 the worst element measured 0.70·d16). Scales from 1e-3 to 1e3 and blocks of zeros.
TEST(QuantizeQ8_0, ErrorWithinHalfAStepPlusScaleRounding) {
  for (float scale : {1e-3f, 0.02f, 1.0f, 1e3f}) {
    std::vector<float> x = normals(32 * 256, 1, scale);
    std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block: d = 0, q = 0
    std::vector<uint8_t> q(34 * 256);
    quantize_q8_0(x.data(), 256, q.data());
    std::vector<float> y(x.size());
    dequant_q8_0(q.data(), 256, y.data());
    double worst = 0;  // in units of d16
    for (int b = 0; b < 256; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
      const float d = amax / 127.0f, d16 = f16_at(&q[34 * b]);
      for (int j = 0; j < 32; ++j) {
        const float err = std::fabs(y[32 * b + j] - x[32 * b + j]);
        ASSERT_LE(err, d / 2 + 127 * std::fabs(d - d16) + 1e-6f * amax) << b << " " << j;
        if (d16 >= 0x1p-14f) worst = std::max(worst, double(err / d16));
        if (d16 == 0) {
          ASSERT_EQ(y[32 * b + j], 0.0f);
        }
      }
    }
    EXPECT_LE(worst, 0.5625) << scale;
  }
}

// Values d16·q with integer q and some |q| = 127 come back exactly; so do ±amax.
TEST(QuantizeQ8_0, ValuesOnTheGridRoundTripExactly) {
  std::mt19937 rng(2);
  std::vector<float> x(32 * 64);
  for (int b = 0; b < 64; ++b) {
    const float d =
        f16_to_f32(f32_to_f16(std::ldexp(1.0f + float(rng() % 1000) / 1000, -int(rng() % 12))));
    for (int j = 0; j < 32; ++j) x[32 * b + j] = d * float(int(rng() % 255) - 127);
    x[32 * b + int(rng() % 32)] = (b % 2 ? -127.0f : 127.0f) * d;
  }
  std::vector<uint8_t> q(34 * 64);
  quantize_q8_0(x.data(), 64, q.data());
  std::vector<float> y(x.size());
  dequant_q8_0(q.data(), 64, y.data());
  EXPECT_EQ(x, y);
}

// Relative RMS error on N(0, σ) data: measured 0.0715 for every σ from 1e-3 to 100 (the
// format is scale-free while d stays a normal f16); bound 0.075. For comparison, a 4-bit grid
// spanning each sub-block's [min(x, 0), max] with exact (unquantized) scales gives 0.078.
TEST(QuantizeQ4_K, RelativeRmseOnNormalData) {
  for (float scale : {1e-3f, 0.02f, 1.0f, 100.0f}) {
    const double e = rel_rmse(DType::Q4_K, normals(256 * 64, 3, scale));
    EXPECT_LE(e, 0.075) << scale;
    EXPECT_GE(e, 0.05) << scale;  // a sanity floor: 4 bits cannot do much better
  }
  // Heavier tails (normal × |normal|): measured 0.0900.
  std::vector<float> x = normals(256 * 64, 4), s = normals(256 * 64, 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::fabs(s[i]);
  EXPECT_LE(rel_rmse(DType::Q4_K, x), 0.095);
  EXPECT_LE(rel_rmse(DType::Q8_0, normals(32 * 512, 6)), 0.006);  // Q8_0, for scale: 0.00534
}

// Random Q4_K blocks whose sub-blocks each use q = 0 and 15, with sc = 63 and m = 63 somewhere
// in the block: their decoded values encode back to the same values, bit for bit.
TEST(QuantizeQ4_K, ValuesOnTheGridRoundTripExactly) {
  std::mt19937 rng(7);
  const int nb = 64;
  std::vector<uint8_t> blocks(144 * nb);
  for (int b = 0; b < nb; ++b) {
    uint8_t* blk = &blocks[144 * b];
    const uint16_t d =
        f32_to_f16(std::ldexp(1.0f + float(rng() % 1000) / 1000, -8 - int(rng() % 8)));
    const uint16_t dmin =
        f32_to_f16(std::ldexp(1.0f + float(rng() % 1000) / 1000, -8 - int(rng() % 8)));
    std::memcpy(blk, &d, 2);
    std::memcpy(blk + 2, &dmin, 2);
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) sc[s] = 1 + int(rng() % 63), m[s] = int(rng() % 64);
    sc[rng() % 8] = 63, m[rng() % 8] = 63;
    uint8_t* scales = blk + 4;
    for (int j = 0; j < 4; ++j) {
      scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
      scales[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
      scales[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    uint8_t* qs = blk + 16;
    for (int i = 0; i < 128; ++i) qs[i] = uint8_t(rng());
    for (int s = 0; s < 8; ++s) {  // q = 0 at element 0, 15 at element 1 of each sub-block
      const int shift = 4 * (s & 1);
      uint8_t* q = qs + 32 * (s / 2);
      q[0] = uint8_t(q[0] & ~(15 << shift));
      q[1] = uint8_t(q[1] | (15 << shift));
    }
  }
  std::vector<float> x(256 * nb), y(256 * nb);
  dequant_q4_k(blocks.data(), nb, x.data());
  std::vector<uint8_t> q(144 * nb);
  quantize_q4_k(x.data(), nb, q.data());
  dequant_q4_k(q.data(), nb, y.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << i;
}

TEST(QuantizeQ4_K, EdgeBlocks) {
  std::vector<float> x(256 * 4, 0.0f);  // zeros, a constant > 0, a constant < 0, a ramp ≥ 0
  for (int i = 0; i < 256; ++i) x[256 + i] = 0.5f, x[512 + i] = -0.25f, x[768 + i] = float(i) / 255;
  std::vector<uint8_t> q(144 * 4);
  quantize_q4_k(x.data(), 4, q.data());
  std::vector<float> y(x.size());
  dequant_q4_k(q.data(), 4, y.data());
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(y[i], 0.0f);
    EXPECT_NEAR(y[256 + i], 0.5f, 0.5f / 126);  // 6-bit sc and f16 d: ≤ 1/126 relative
    EXPECT_NEAR(y[512 + i], -0.25f, 0.25f / 126);
    EXPECT_NEAR(y[768 + i], x[768 + i], 1.0f / 15);  // within a 4-bit step of the sub-block
  }
}

// Q5_K and Q6_K on N(0, σ) data, relative RMS error: measured Q5_K 0.0359–0.0361 and Q6_K
// 0.0174–0.0177 for σ from 1e-3 to 100 (Q4_K: 0.0715; each extra bit about halves it).
TEST(QuantizeQ5_KQ6_K, RelativeRmseOnNormalData) {
  for (float scale : {1e-3f, 1.0f, 100.0f}) {
    const double e5 = rel_rmse(DType::Q5_K, normals(256 * 64, 8, scale));
    const double e6 = rel_rmse(DType::Q6_K, normals(256 * 64, 9, scale));
    EXPECT_LE(e5, 0.038) << scale;
    EXPECT_GE(e5, 0.025) << scale;  // sanity floors: 5 and 6 bits cannot do much better
    EXPECT_LE(e6, 0.019) << scale;
    EXPECT_GE(e6, 0.012) << scale;
    EXPECT_LT(e6, e5);
  }
}

// Zeros, constants of either sign and a ramp: within a level step, zeros exact; and the codes
// the encoders wrote are the ones block_code reads back (every element's code in range).
TEST(QuantizeQ5_KQ6_K, EdgeBlocks) {
  std::vector<float> x(256 * 4, 0.0f);
  for (int i = 0; i < 256; ++i) x[256 + i] = 0.5f, x[512 + i] = -0.25f, x[768 + i] = float(i) / 255;
  for (DType t : {DType::Q5_K, DType::Q6_K}) {
    std::vector<uint8_t> q(dtype_bytes(t, 1024));
    quantize(t, x.data(), 1024, q.data());
    std::vector<float> y(x.size());
    ASSERT_TRUE(dequant_blocks(t, q.data(), 4, y.data()));
    for (int i = 0; i < 256; ++i) {
      EXPECT_EQ(y[i], 0.0f) << dtype_name(t);
      EXPECT_NEAR(y[256 + i], 0.5f, 0.5f / 120) << dtype_name(t);
      EXPECT_NEAR(y[512 + i], -0.25f, 0.25f / 120) << dtype_name(t);
      EXPECT_NEAR(y[768 + i], x[768 + i], 1.0f / 31) << dtype_name(t);
    }
    for (int b = 0; b < 4; ++b)
      for (int e = 0; e < 256; ++e) {
        const int c = block_code(t, q.data() + b * dtype_block_bytes(t), e);
        ASSERT_GE(c, 0);
        ASSERT_LE(c, t == DType::Q5_K ? 31 : 63);
      }
  }
}

// put_block_code is block_code's inverse: random codes written into zeroed blocks read back.
TEST(QuantizeQ5_KQ6_K, PutBlockCodeInvertsBlockCode) {
  std::mt19937 rng(11);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int hi = t == DType::Q4_K ? 16 : t == DType::Q5_K ? 32 : 64;
    std::vector<uint8_t> b(size_t(dtype_block_bytes(t)), 0);
    int codes[256];
    for (int e = 0; e < 256; ++e) put_block_code(t, b.data(), e, codes[e] = int(rng() % hi));
    for (int e = 0; e < 256; ++e) ASSERT_EQ(block_code(t, b.data(), e), codes[e]) << e;
  }
}

TEST(Quantize, PlainTypesAndErrors) {
  const std::vector<float> x = {1.0f, -2.5f, 1e-7f, 65504.0f, 3.14159265f, 0.1f};
  std::vector<uint8_t> out(24);
  quantize(DType::F16, x.data(), 6, out.data());
  for (int i = 0; i < 6; ++i) {
    uint16_t h;
    std::memcpy(&h, &out[2 * i], 2);
    EXPECT_EQ(h, f32_to_f16(x[i]));
  }
  quantize(DType::BF16, x.data(), 6, out.data());
  for (int i = 0; i < 6; ++i) {
    uint16_t h;
    std::memcpy(&h, &out[2 * i], 2);
    EXPECT_EQ(h, f32_to_bf16(x[i]));
  }
  quantize(DType::F32, x.data(), 6, out.data());
  EXPECT_EQ(std::memcmp(out.data(), x.data(), 24), 0);
  EXPECT_TRUE(quantize_supported(DType::Q4_K));
  EXPECT_TRUE(quantize_supported(DType::Q6_K));
  EXPECT_FALSE(quantize_supported(DType::Q4_0));
  test::expect_error([&] { quantize(DType::Q4_0, x.data(), 32, out.data()); },
                     "cannot encode Q4_0 (supported: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)");
  test::expect_error([&] { quantize(DType::Q8_0, x.data(), 6, out.data()); },
                     "6 elements are not whole 32-element Q8_0 blocks");
}

}  // namespace
}  // namespace basalt::ref
