// NVFP4 in the wgmma layout: the bit-level format of the codes and group scales that the CUDA
// backend's wgmma decode kernel reads (matmul.cu "NVFP4 in the wgmma layout" has the block and
// stage layout). Plain integer functions, compiled for the host too (tests/unit checks the
// packing against the E2M1 and E4M3 tables).
//
// Values. A code's bf16 bits are its sign at bit 15 and its three magnitude bits at bits 6..8:
// e2m1 · 2^-126 exactly (exponent field 0 gives 0 and 0.5 as bf16 subnormals). A group scale
// |S| (the sign goes to the codes) is stored as one byte b = (e + 9) << 3 | m, |S| = 2^e ·
// (1 + m/8), e in -9 .. 8 (E4M3 subnormals normalised; the NaN codes read as 480, as everywhere
// in basalt); its bf16 bits b · 16 + 0x7680 are |S| · 2^119 (exponent field e + 246 <= 254). One
// bf16x2 multiply gives inner · 2^-7 exactly (inner = e2m1 · S, at least 2^-10 when not zero:
// the products are normal bf16), so the kernels run matmul_bf16 over inner · 2^-7 and multiply
// the sum by factor · 2^7. Scaling every product by the same power of two changes no rounding
// while nothing leaves the normal range, so this equals matmul_bf16(inner) · factor bit for bit
// unless an x · inner product is below 2^-119 in magnitude (docs/formats.md); prefill and decode
// of this layout both use the scaled form, so they agree always.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BASALT_WG_HD __host__ __device__ __forceinline__
#else
#define BASALT_WG_HD inline
#endif

namespace basalt::cuda::wg {

constexpr int kBlockRows = 64;                  // weight rows a block (four 16-row warp tiles)
constexpr int kStageK = 128;                    // k a stage (eight k16 slices)
constexpr int kCodeBytes = 64 * kStageK / 2;    // 4,096
constexpr int kScaleBytes = 64 * kStageK / 16;  // 512
constexpr int kBlobBytes = kCodeBytes + kScaleBytes;
constexpr int kInnerShift = 7;               // inner' = inner · 2^-7, factor' = factor · 2^7
constexpr uint32_t kScaleBias = 0x7680u;     // (119 + 127 - 9) << 7
constexpr uint32_t kPairMask = 0x81C081C0u;  // a bf16x2 of two codes: signs, magnitudes

// One 32-bit word holds a lane's eight codes of a k16 slice as four bf16x2 pairs, each the mma
// A-fragment register it becomes: pair 0 = row g, k 2q and 2q + 1 (low half first); 1 = row g +
// 8, same k; 2 = row g, k 2q + 8 and 2q + 9; 3 = row g + 8, those k. Pair p's bit at target
// position t (t in 6, 7, 8, 15 for the low half, +16 for the high half) is stored at bit
// src(p, t), chosen so that each pair comes out of the word with one to four instructions:
//   pair 0: w & kPairMask                       (src = t)
//   pair 1: (w << 6) & kPairMask                (src = t - 6)
//   pair 2: rotr(w, 6) & kPairMask              (src = (t + 6) mod 32)
//   pair 3: ((w << 4) & 0x81808180) | ((w >> 4) & 0x00400040)
//                                               (src = t - 4, except t = 6, 22: t + 4)
// The four source sets are disjoint and fill the word.
BASALT_WG_HD int pair_src(int p, int t) {
  switch (p) {
    case 0:
      return t;
    case 1:
      return t - 6;
    case 2:
      return (t + 6) & 31;
    default:
      return (t == 6 || t == 22) ? t + 4 : t - 4;
  }
}

BASALT_WG_HD uint32_t rotr6(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(w, w, 6);
#else
  return (w >> 6) | (w << 26);
#endif
}

// The four pairs of a word as bf16x2 bits (each half e2m1 · 2^-126).
BASALT_WG_HD void unpack_word(uint32_t w, uint32_t (&pr)[4]) {
  pr[0] = w & kPairMask;
  pr[1] = (w << 6) & kPairMask;
  pr[2] = rotr6(w) & kPairMask;
  pr[3] = ((w << 4) & 0x81808180u) | ((w >> 4) & 0x00400040u);
}

// codes[2p] (low half) and codes[2p + 1] (high half) of pair p: E2M1 nibbles, sign at bit 3.
BASALT_WG_HD uint32_t pack_word(const uint32_t (&codes)[8]) {
  uint32_t w = 0;
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h) {
      const uint32_t c = codes[2 * p + h];
      const int base = 16 * h;
      w |= (c & 1u) << pair_src(p, base + 6);
      w |= (c >> 1 & 1u) << pair_src(p, base + 7);
      w |= (c >> 2 & 1u) << pair_src(p, base + 8);
      w |= (c >> 3 & 1u) << pair_src(p, base + 15);
    }
  return w;
}

// The stored byte of a group scale's magnitude (E4M3 bits & 0x7f, not zero: a zero scale's
// group stores zero magnitudes instead, nvfp4_to_wg_kernel).
BASALT_WG_HD uint32_t scale_code(uint32_t mag) {
  const uint32_t E = mag >> 3 & 15u, M = mag & 7u;
  if (E) return (E + 2u) << 3 | M;  // 2^(E - 7) (1 + M/8): e + 9 = E + 2
  // Subnormal: M · 2^-9 = 2^e (1 + m/8) with e = -9 + floor(log2 M).
  const uint32_t lg = M >= 4 ? 2u : M >= 2 ? 1u : 0u;
  return lg << 3 | ((M << (3 - lg)) & 7u);
}
// bf16 bits of a stored scale byte: |S| · 2^119.
BASALT_WG_HD uint32_t scale_bf16(uint32_t b) {
  return b * 16u + kScaleBias;
}

}  // namespace basalt::cuda::wg
