// FP8 E4M3 in the wgmma layout: the bit-level format of the codes that the CUDA backend's wgmma
// decode kernel reads (matmul.cu "Scaled weights in the wgmma layout" has the block and stage
// layout; nvfp4_wg.h is NVFP4's). Plain integer functions, compiled for the host too
// (tests/unit checks the packing of every code against the E4M3 definition).
//
// Values. A code's bf16 bits are its sign at bit 15 and its seven exponent and mantissa bits at
// bits 4..10: e4m3 · 2^-120 exactly (exponent field 0 puts E4M3 subnormals on bf16 subnormals;
// the NaN codes 0x7f / 0xff read as ±480, as everywhere in basalt). One bf16x2 multiply by 2^120
// (exact: bf16 arithmetic keeps subnormals) gives the inner value itself, so this layout's paths
// are the checkpoint layout's bit for bit, with no condition (unlike NVFP4's, whose inner values
// are scaled by 2^-7).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BASALT_WG8_HD __host__ __device__ __forceinline__
#else
#define BASALT_WG8_HD inline
#endif

namespace basalt::cuda::wg8 {

constexpr int kBlobBytes = 64 * 128;         // a 64-row block's codes of one 128-k stage: 8,192
constexpr uint32_t kTwo120 = 0x7B807B80u;    // bf16x2 (2^120, 2^120)
constexpr uint32_t kPairMask = 0x87F087F0u;  // a bf16x2 of two codes: signs, magnitudes

// One 32-bit word holds four codes as two bf16x2 pairs, each the mma A-fragment register it
// becomes (matmul.cu: pair 0 of a slice's first word is row g at k 2q and 2q + 1, pair 1 row
// g + 8; the second word the same at k + 8). Pair p's bit at target position t (t in 4..10, 15
// for the low half, +16 for the high half) is stored at bit src(p, t):
//   pair 0: w & kPairMask                                  (src = t)
//   pair 1: ((w << 4) & 0x80F080F0) | ((w >> 4) & 0x07000700)
//                                  (src = t - 4 for t in 4..7 and 15, t + 4 for t in 8..10)
// The two source sets are disjoint and fill the word.
BASALT_WG8_HD int pair_src(int p, int t) {
  if (p == 0) return t;
  const int u = t & 15;
  return (u >= 8 && u <= 10) ? t + 4 : t - 4;
}

// The two pairs of a word as bf16x2 bits (each half e4m3 · 2^-120).
BASALT_WG8_HD void unpack_word(uint32_t w, uint32_t& p0, uint32_t& p1) {
  p0 = w & kPairMask;
  p1 = ((w << 4) & 0x80F080F0u) | ((w >> 4) & 0x07000700u);
}

// codes[2p] (low half) and codes[2p + 1] (high half) of pair p: E4M3 bytes.
BASALT_WG8_HD uint32_t pack_word(const uint32_t (&codes)[4]) {
  uint32_t w = 0;
  for (int p = 0; p < 2; ++p)
    for (int h = 0; h < 2; ++h) {
      const uint32_t c = codes[2 * p + h];
      const int base = 16 * h;
      for (int i = 0; i < 7; ++i) w |= (c >> i & 1u) << pair_src(p, base + 4 + i);
      w |= (c >> 7 & 1u) << pair_src(p, base + 15);
    }
  return w;
}

}  // namespace basalt::cuda::wg8
