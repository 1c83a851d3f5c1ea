// src/core/dtype conversions against values computed independently (by formula or by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

namespace basalt {
namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

// IEEE binary16 value by the textbook formula.
double f16_formula(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  if (e == 31) v = m ? std::nan("") : INFINITY;
  return s ? -v : v;
}

TEST(Dtype, F16ToF32EveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float got = f16_to_f32(uint16_t(h));
    double want = f16_formula(uint16_t(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(got, want) << h;
      EXPECT_EQ(std::signbit(got), bool(h & 0x8000)) << h;
      EXPECT_EQ(f32_to_f16(got), h) << "round trip " << h;  // every f16 survives f32
    }
  }
}

TEST(Dtype, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);             // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                    // max
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);                    // below the tie to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                    // tie -> even = inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);      // just above the tie
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);         // tie -> even
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(-std::numeric_limits<float>::signaling_NaN()))));
}

// Nearest-even by brute force over the two neighbouring f16 values, in double.
uint16_t f16_reference(float x) {
  if (std::isnan(x)) return 0x7e00;
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(double(x));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0;
  for (uint16_t step = 0x4000; step; step >>= 1)  // largest magnitude <= a
    if (lo + step < 0x7c00 && f16_formula(uint16_t(lo + step)) <= a) lo = uint16_t(lo + step);
  double dl = a - f16_formula(lo), dh = f16_formula(uint16_t(lo + 1)) - a;
  uint16_t r = (dh < dl || (dh == dl && (lo & 1))) ? uint16_t(lo + 1) : lo;
  return sign | r;
}

TEST(Dtype, F32ToF16MatchesReferenceOnRandomValues) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    float x = std::bit_cast<float>(uint32_t(rng()));
    if (i % 2) x = std::ldexp(float(rng() % 100000) / 1000.0f, int(rng() % 40) - 30);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_f16(x), f16_reference(x)) << std::hexfloat << x;
  }
}

TEST(Dtype, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc0a0), -5.0f);
  EXPECT_EQ(bf16_to_f32(0x7f80), INFINITY);
  EXPECT_EQ(bf16_to_f32(0xff80), -INFINITY);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
  EXPECT_EQ(bf16_to_f32(0x0001), 0x1p-133f);  // smallest subnormal
  EXPECT_EQ(bits(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(0x1p-133f), 0x0001);
  EXPECT_EQ(f32_to_bf16(0x1p-134f), 0x0000);  // tie -> even (zero)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0xffffffffu)))));
  for (uint32_t h = 0; h < 65536; ++h) {  // every non-NaN bf16 survives f32 and back
    float f = bf16_to_f32(uint16_t(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
}

TEST(Dtype, Fp8E4M3) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);      // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);      // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in E4M3FN
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // max
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  for (int v = 0; v < 256; ++v) {  // formula check of every code
    int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) continue;
    double want = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    EXPECT_EQ(fp8_e4m3_to_f32(uint8_t(v)), s ? -want : want) << v;
  }
}

TEST(Dtype, Fp8E5M2) {
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0xbe), -1.5f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), 0x1p-16f);  // smallest subnormal
  EXPECT_EQ(fp8_e5m2_to_f32(0x04), 0x1p-14f);  // smallest normal
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);  // max
  EXPECT_EQ(fp8_e5m2_to_f32(0x7c), INFINITY);
  EXPECT_EQ(fp8_e5m2_to_f32(0xfc), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0x7d)));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0xff)));
}

TEST(Dtype, NamesSizesAndBlocks) {
  const char* names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8",  "I16",
                         "I32", "I64", "U8",  "U16",  "U32",     "U64",     "BOOL"};
  const int sizes[] = {8, 4, 2, 2, 1, 1, 1, 2, 4, 8, 1, 2, 4, 8, 1};
  for (int i = 0; i < 15; ++i) {
    DType t;
    ASSERT_TRUE(dtype_from_safetensors(names[i], &t)) << names[i];
    EXPECT_EQ(dtype_name(t), names[i]);
    EXPECT_EQ(dtype_block_bytes(t), sizes[i]) << names[i];
    EXPECT_EQ(dtype_bytes(t, 10), size_t(10 * sizes[i]));
  }
  DType t;
  EXPECT_FALSE(dtype_from_safetensors("Q8_0", &t));  // a GGUF block type, not a safetensors one
  EXPECT_FALSE(dtype_from_safetensors("f32", &t));
  EXPECT_EQ(dtype_bytes(DType::Q8_0, 64), 68u);
  EXPECT_THROW(dtype_bytes(DType::Q8_0, 33), Error);
  EXPECT_TRUE(dtype_is_float(DType::BF16));
  EXPECT_FALSE(dtype_is_float(DType::U8));
}

}  // namespace
}  // namespace basalt
