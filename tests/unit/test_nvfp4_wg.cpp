// The NVFP4 wgmma layout's bit format (src/backends/cuda/nvfp4_wg.h), on the host: codes packed
// into a word come back as bf16 pairs of e2m1 · 2^-126, every E4M3 scale byte as |S| · 2^119,
// and their product as e2m1 · S · 2^-7 exactly (the values written out from the E2M1 and E4M3
// definitions here, not through the header).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "backends/cuda/nvfp4_wg.h"

namespace basalt {
namespace {

namespace wg = cuda::wg;

double e2m1(uint32_t c) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}
double e4m3_mag(uint32_t b) {  // b & 0x7f; 0x7f reads as 480 (basalt's NaN rule)
  const int E = int(b >> 3 & 15u), M = int(b & 7u);
  return E == 0 ? std::ldexp(M, -9) : std::ldexp(8 + M, E - 10);
}
double bf16_value(uint32_t h) {  // exact: bf16 widens to f32 (subnormals included)
  return double(std::bit_cast<float>(h << 16));
}
// bf16 round-to-nearest-even product of two bf16 values, as mul.rn.bf16x2 computes it per half.
uint32_t bf16_mul(uint32_t a, uint32_t b) {
  const double p = bf16_value(a) * bf16_value(b);  // exact in double (8 + 8 significant bits)
  const uint32_t f = std::bit_cast<uint32_t>(float(p));
  EXPECT_EQ(double(float(p)), p) << "the product is exact in f32";
  const uint32_t r = f + 0x7fffu + (f >> 16 & 1u);
  return r >> 16;
}

TEST(Nvfp4Wg, PairSourcesFillTheWord) {
  uint32_t seen = 0;
  for (int p = 0; p < 4; ++p)
    for (int t : {6, 7, 8, 15, 22, 23, 24, 31}) {
      const int s = wg::pair_src(p, t);
      ASSERT_TRUE(s >= 0 && s < 32) << p << " " << t;
      EXPECT_EQ(seen >> s & 1u, 0u) << "bit " << s << " used twice";
      seen |= 1u << s;
    }
  EXPECT_EQ(seen, 0xffffffffu);
}

TEST(Nvfp4Wg, PackedCodesUnpackToTheirValues) {
  std::mt19937 rng(7);
  for (int it = 0; it < 20000; ++it) {
    uint32_t codes[8];
    for (uint32_t& c : codes) c = rng() & 15u;
    if (it < 16)  // every code in every position
      for (int i = 0; i < 8; ++i) codes[i] = uint32_t(it + i) & 15u;
    uint32_t pr[4];
    wg::unpack_word(wg::pack_word(codes), pr);
    for (int p = 0; p < 4; ++p)
      for (int h = 0; h < 2; ++h) {
        const uint32_t half = pr[p] >> (16 * h) & 0xffffu;
        const uint32_t c = codes[2 * p + h];
        EXPECT_EQ(bf16_value(half), std::ldexp(e2m1(c), -126)) << "pair " << p << " half " << h;
        EXPECT_EQ(half >> 15, c >> 3) << "sign kept for zero codes too";
      }
  }
}

TEST(Nvfp4Wg, EveryScaleByteAndProductIsExact) {
  for (uint32_t mag = 1; mag < 128; ++mag) {
    const uint32_t b = wg::scale_code(mag);
    ASSERT_LT(b, 256u);
    const uint32_t s = wg::scale_bf16(b);
    ASSERT_LT(s, 0x7f80u) << "finite";
    EXPECT_EQ(bf16_value(s), std::ldexp(e4m3_mag(mag), 119)) << mag;
    for (uint32_t c = 0; c < 16; ++c) {
      uint32_t codes[8] = {c, c, c, c, c, c, c, c};
      uint32_t pr[4];
      wg::unpack_word(wg::pack_word(codes), pr);
      const uint32_t prod = bf16_mul(pr[0] & 0xffffu, s);
      EXPECT_EQ(bf16_value(prod), std::ldexp(e2m1(c) * e4m3_mag(mag), -wg::kInnerShift))
          << "code " << c << " scale " << mag;
    }
  }
}

}  // namespace
}  // namespace basalt
