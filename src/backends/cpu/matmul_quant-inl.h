// Matmul over GGUF block-quantized weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), included by
// kernels_hwy.cpp once per SIMD target. Blocks are decoded in registers, never to memory:
// per block, a row's scales (and mins) are unpacked once into a few floats; per vector step,
// L weights are widened from bytes to 32-bit lanes, shifted, masked, converted and scaled,
// then FMA'd with f32 activations. Decoded weights are bit-identical to ref::dequant_*
// (ops/ref/quants.h): every product is formed in the same order.
//
// Schedule (exactness contract), for every block dtype: acc0 takes vector steps 0, 2, 4…,
// acc1 steps 1, 3, 5…, then sum(acc0 + acc1) + 0. Blocks hold an even number of vector steps (32 or 256 elements, L <= 16), so
// walking block by block visits the steps in the same order with the same accumulator.
// Tiling over rows of x or W interleaves dot products but never changes one.

// Highway's per-target include guard idiom.
#if defined(BASALT_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BASALT_MATMUL_QUANT_INL_H_
#undef BASALT_MATMUL_QUANT_INL_H_
#else
#define BASALT_MATMUL_QUANT_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <bit>
#include <cstring>

#include "core/dtype.h"
#include "ops/ref/quants.h"

HWY_BEFORE_NAMESPACE();
namespace basalt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace quant {

// f16 → f32, exact, branch-free for finite values: shifting the half's bits into a float's
// exponent/mantissa and scaling by 2^112 maps normals and subnormals alike.
HWY_INLINE float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (HWY_UNLIKELY((h & 0x7c00u) == 0x7c00u)) return f16_to_f32(h);  // inf / NaN
  const float mag = std::bit_cast<float>(uint32_t(h & 0x7fffu) << 13) * 0x1p112f;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | (uint32_t(h & 0x8000u) << 16));
}

// (p[i] >> shift) & mask for the L bytes at p, widened to i32 lanes.
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<int32_t, DF>> Bits(DF, const uint8_t* p, int shift, uint32_t mask) {
  const hn::Rebind<uint32_t, DF> du;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  const auto v = hn::PromoteTo(du, hn::LoadU(d8, p));
  return hn::BitCast(di, hn::And(hn::ShiftRightSame(v, shift), hn::Set(du, mask)));
}

// Each row type: kElems/kBytes per block; Scales = what a block's header decodes to;
// prepare(block) → Scales; load(d, s, block, e) → weights e .. e+L-1 of the block.

// Q8_0: x = d * q.
struct RowQ8_0 {
  static constexpr int kElems = 32, kBytes = 34;
  struct Scales {
    float d;
  };
  HWY_INLINE Scales prepare(const uint8_t* b) const { return {LoadF16(b)}; }
  template <class DF>
  HWY_INLINE hn::Vec<DF> load(DF d, const Scales& s, const uint8_t* b, int e) const {
    const hn::Rebind<int8_t, DF> d8;
    const hn::Rebind<int32_t, DF> di;
    const auto q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(b + 2 + e)));
    return hn::Mul(hn::Set(d, s.d), hn::ConvertTo(d, q));
  }
};

// Q4_0: x = d * (q - 8).
struct RowQ4_0 {
  static constexpr int kElems = 32, kBytes = 18;
  struct Scales {
    float d;
  };
  HWY_INLINE Scales prepare(const uint8_t* b) const { return {LoadF16(b)}; }
  template <class DF>
  HWY_INLINE hn::Vec<DF> load(DF d, const Scales& s, const uint8_t* b, int e) const {
    const hn::Rebind<int32_t, DF> di;
    const auto q = Bits(d, b + 2 + (e & 15), (e >> 4) * 4, 15);
    return hn::Mul(hn::Set(d, s.d), hn::ConvertTo(d, hn::Sub(q, hn::Set(di, 8))));
  }
};

// Q4_K / Q5_K: x = (d * sc) * q - dmin * m. (d * sc) * q is exact (≤ 22 bits), so one fused
// MulSub rounds exactly like the reference's multiply-then-subtract.
struct KScales {
  float ds[8], dm[8];
};
HWY_INLINE KScales PrepareK(const uint8_t* b) {
  KScales s;
  const float d = LoadF16(b), dmin = LoadF16(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ref::k_scale_min(b + 4, j, &sc, &m);
    s.ds[j] = d * float(sc);
    s.dm[j] = dmin * float(m);
  }
  return s;
}

struct RowQ4K {
  static constexpr int kElems = 256, kBytes = 144;
  using Scales = KScales;
  HWY_INLINE Scales prepare(const uint8_t* b) const { return PrepareK(b); }
  template <class DF>
  HWY_INLINE hn::Vec<DF> load(DF d, const Scales& s, const uint8_t* b, int e) const {
    const int j = e / 32, l = e % 32;
    const auto q = Bits(d, b + 16 + 32 * (j / 2) + l, 4 * (j & 1), 15);
    return hn::MulSub(hn::ConvertTo(d, q), hn::Set(d, s.ds[j]), hn::Set(d, s.dm[j]));
  }
};

struct RowQ5K {
  static constexpr int kElems = 256, kBytes = 176;
  using Scales = KScales;
  HWY_INLINE Scales prepare(const uint8_t* b) const { return PrepareK(b); }
  template <class DF>
  HWY_INLINE hn::Vec<DF> load(DF d, const Scales& s, const uint8_t* b, int e) const {
    const int j = e / 32, l = e % 32;
    const auto lo = Bits(d, b + 48 + 32 * (j / 2) + l, 4 * (j & 1), 15);
    const auto hi = Bits(d, b + 16 + l, j, 1);
    const auto q = hn::Or(lo, hn::ShiftLeft<4>(hi));
    return hn::MulSub(hn::ConvertTo(d, q), hn::Set(d, s.ds[j]), hn::Set(d, s.dm[j]));
  }
};

// Q6_K: x = (d * sc) * (q - 32), the last product rounding as in the reference.
struct RowQ6K {
  static constexpr int kElems = 256, kBytes = 210;
  struct Scales {
    float ds[16];
  };
  HWY_INLINE Scales prepare(const uint8_t* b) const {
    Scales s;
    const float d = LoadF16(b + 208);
    for (int j = 0; j < 16; ++j) s.ds[j] = d * float(int8_t(b[192 + j]));
    return s;
  }
  template <class DF>
  HWY_INLINE hn::Vec<DF> load(DF d, const Scales& s, const uint8_t* b, int e) const {
    const hn::Rebind<int32_t, DF> di;
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const auto lo = Bits(d, b + 64 * h + 32 * (g & 1) + l, 4 * (g >> 1), 15);
    const auto hi = Bits(d, b + 128 + 32 * h + l, 2 * g, 3);
    const auto q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(di, 32));
    return hn::Mul(hn::ConvertTo(d, q), hn::Set(d, s.ds[e / 16]));
  }
};

// R rows of x against C weight rows (each a pointer to its first block).
template <int R, int C, class Row>
HWY_INLINE void TileQ(const float* x, int64_t ldx, const uint8_t* const* w, int64_t K, float* y,
                      int64_t ldy) {
  using DF = hn::ScalableTag<float>;
  const DF d;
  const int L = int(hn::Lanes(d));
  const Row row{};
  hn::Vec<DF> a0[R][C], a1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a0[r][c] = a1[r][c] = hn::Zero(d);
  for (int64_t blk = 0; blk < K / Row::kElems; ++blk) {
    const uint8_t* b[C];
    typename Row::Scales s[C];
    for (int c = 0; c < C; ++c) {
      b[c] = w[c] + blk * Row::kBytes;
      // Each block's header is a cache miss at the head of the dependency chain (perf: 17 % of
      // decode time on its first load): fetch the bytes 1 KiB ahead.
      for (int o = 0; o < Row::kBytes; o += 64) hwy::Prefetch(b[c] + 1024 + o);
      s[c] = row.prepare(b[c]);
    }
    const float* xb = x + blk * Row::kElems;
#pragma GCC unroll 8  // constant offsets and shift counts once unrolled (8 steps at L = 16)
    for (int e = 0; e < Row::kElems; e += 2 * L) {
      hn::Vec<DF> w0[C], w1[C];
      for (int c = 0; c < C; ++c) {
        w0[c] = row.load(d, s[c], b[c], e);
        w1[c] = row.load(d, s[c], b[c], e + L);
      }
      for (int r = 0; r < R; ++r) {
        const auto x0 = hn::LoadU(d, xb + r * ldx + e);
        const auto x1 = hn::LoadU(d, xb + r * ldx + e + L);
        for (int c = 0; c < C; ++c) {
          a0[r][c] = hn::MulAdd(x0, w0[c], a0[r][c]);
          a1[r][c] = hn::MulAdd(x1, w1[c], a1[r][c]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)  // "+ 0.0f": an empty scalar tail (turns -0 into +0)
      y[r * ldy + c] = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0[r][c], a1[r][c]))) + 0.0f;
}

// y[t, n] for t < T, n in [n0, n1): tiles of 4 weight rows × 4 activation rows.
template <class Row>
HWY_INLINE void MatmulQuant(const float* x, int64_t T, const WeightRef& w, int64_t n0, int64_t n1,
                            float* y, int64_t ldy) {
  if (hn::Lanes(hn::ScalableTag<float>()) > 16)
    HWY_ABORT("quantized matmul assumes at most 16 f32 lanes (blocks of 32 = 2 steps)");
  const auto* p = static_cast<const uint8_t*>(w.data);
  const int64_t K = w.cols, row_bytes = K / Row::kElems * Row::kBytes;
  constexpr int kC = 4;
  int64_t n = n0;
  for (; n + kC <= n1; n += kC) {
    const uint8_t* rows[kC] = {p + n * row_bytes, p + (n + 1) * row_bytes, p + (n + 2) * row_bytes,
                               p + (n + 3) * row_bytes};
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) TileQ<4, kC, Row>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
    for (; t < T; ++t) TileQ<1, kC, Row>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
  }
  for (; n < n1; ++n) {
    const uint8_t* rows[1] = {p + n * row_bytes};
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) TileQ<4, 1, Row>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
    for (; t < T; ++t) TileQ<1, 1, Row>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
  }
}

}  // namespace quant
}  // namespace HWY_NAMESPACE
}  // namespace basalt::cpu
HWY_AFTER_NAMESPACE();

#endif  // BASALT_MATMUL_QUANT_INL_H_
