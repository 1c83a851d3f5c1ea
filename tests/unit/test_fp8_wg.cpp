// The FP8 wgmma layout's bit format (src/backends/cuda/fp8_wg.h), on the host: every E4M3 code,
// packed into a word in each of its four places, comes back as the bf16 of e4m3 · 2^-120, and
// times 2^120 (the kernels' one bf16x2 multiply) as the E4M3 value itself (values written out
// from the E4M3 definition here, not through the header).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "backends/cuda/fp8_wg.h"

namespace basalt {
namespace {

namespace wg8 = cuda::wg8;

double e4m3(uint32_t b) {  // 0x7f / 0xff read as ±480 (basalt's NaN rule)
  const int E = int(b >> 3 & 15u), M = int(b & 7u);
  const double mag = E == 0 ? std::ldexp(M, -9) : std::ldexp(8 + M, E - 10);
  return (b & 0x80u) ? -mag : mag;
}
double bf16_value(uint32_t h) {  // exact: bf16 widens to f32 (subnormals included)
  return double(std::bit_cast<float>(h << 16));
}
// bf16 round-to-nearest-even product, as mul.rn.bf16x2 computes it per half.
uint32_t bf16_mul(uint32_t a, uint32_t b) {
  const double p = bf16_value(a) * bf16_value(b);
  const uint32_t f = std::bit_cast<uint32_t>(float(p));
  EXPECT_EQ(double(float(p)), p) << "the product is exact in f32";
  return (f + 0x7fffu + (f >> 16 & 1u)) >> 16;
}

TEST(Fp8Wg, PairSourcesFillTheWord) {
  uint32_t seen = 0;
  for (int p = 0; p < 2; ++p)
    for (int h = 0; h < 2; ++h)
      for (int t : {4, 5, 6, 7, 8, 9, 10, 15}) {
        const int s = wg8::pair_src(p, t + 16 * h);
        ASSERT_TRUE(s >= 0 && s < 32) << p << " " << t;
        EXPECT_EQ(seen >> s & 1u, 0u) << "bit " << s << " used twice";
        seen |= 1u << s;
      }
  EXPECT_EQ(seen, 0xffffffffu);
}

TEST(Fp8Wg, EveryCodeInEveryPlaceUnpacksToItsValue) {
  std::mt19937 rng(11);
  for (uint32_t c = 0; c < 256; ++c)
    for (int place = 0; place < 4; ++place) {
      uint32_t codes[4];
      for (uint32_t& o : codes) o = rng() & 0xffu;  // the other places: random codes
      codes[place] = c;
      uint32_t pr[2];
      wg8::unpack_word(wg8::pack_word(codes), pr[0], pr[1]);
      for (int i = 0; i < 4; ++i) {
        const uint32_t half = pr[i / 2] >> (16 * (i % 2)) & 0xffffu;
        EXPECT_EQ(bf16_value(half), std::ldexp(e4m3(codes[i]), -120))
            << "code " << codes[i] << " place " << i;
        EXPECT_EQ(half >> 15, codes[i] >> 7) << "sign kept for zero codes too";
        EXPECT_EQ(bf16_value(bf16_mul(half, wg8::kTwo120 & 0xffffu)), e4m3(codes[i]))
            << "times 2^120 is the E4M3 value, code " << codes[i];
      }
    }
  EXPECT_EQ(bf16_value(wg8::kTwo120 >> 16), std::ldexp(1.0, 120));
}

}  // namespace
}  // namespace basalt
