// Matmul over GGUF block-quantised weights with 8-bit activations (ops/ref/qdot.h defines the
// arithmetic), included by kernels_hwy.cpp once per SIMD target. Weight codes are unpacked in
// registers to bytes; byte products are summed in integers, which is exact whatever the
// instruction mix, so each target only has to keep qdot.h's lane layout (8 lanes of 4
// consecutive elements per 32) and its float steps (one fma per lane per block, the 8-lane
// tree, the min term in a scalar fma). Results equal ref::q8_dot bit for bit.
//
//  - x86, AVX2: _mm256_maddubs_epi16 (u8 × s8 → adjacent pairs in i16) then _mm256_madd_epi16
//    by the sub-block scale (pairs of pairs in i32): lane m holds elements 4m .. 4m+3, as
//    qdot.h lays out. Signed codes (Q8_0, Q4_0) go through |w| and sign(x, w).
//  - x86, AVX-512 (AVX3 and up): the same steps on 512-bit vectors holding two weight rows side
//    by side (row c in the low 256 bits, c+1 in the high, the activation sub-block in both), so
//    each half's lanes are that row's lanes above and the float steps run for both rows in
//    one instruction. With VNNI (AVX3_DL) vpdpbusd replaces maddubs + madd for the signed
//    codes and the K types fold madd + add into vpdpwssd (the same integer sums: no
//    saturation either way). A single row against one weight row (decode, where memory is
//    the limit) takes, for the K types, 512-bit vectors holding two sub-blocks of the row,
//    added as integers at the end of the block; for Q8_0 / Q4_0, the AVX2 code.
//  - Arm64 (NEON): vmull_s8 products, vpaddlq_s16 then vpaddq_s32 pair them up the same way,
//    a sub-block in two 4-lane halves.
//  - Other targets: ref::q8_dot itself.
// Tiles: 8 (AVX-512) or 4 activation rows × 2 weight rows (AVX2 K types: × 1), then single
// rows × 1 weight row, in groups of 4 weight rows that share each tile of activation rows.

// Highway's per-target include guard idiom.
#if defined(BASALT_MATMUL_Q8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BASALT_MATMUL_Q8_INL_H_
#undef BASALT_MATMUL_Q8_INL_H_
#else
#define BASALT_MATMUL_Q8_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "ops/ref/qdot.h"
#include "ops/ref/quants.h"

// Which implementation this pass (target) compiles; redefined on every pass.
#undef BASALT_Q8_X86
#undef BASALT_Q8_NEON
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define BASALT_Q8_X86 1
#include <immintrin.h>
#elif HWY_ARCH_ARM_A64
#define BASALT_Q8_NEON 1
#include <arm_neon.h>
#endif

// AVX-512 VNNI. Highway's AVX3_DL target runs on every CPU with AVX512_VNNI (Ice Lake, Zen 4
// and later) but its compiler target string names only the VEX "avxvnni" (Alder Lake, Zen 5),
// so the 256-bit intrinsics it allows would be VEX instructions that Zen 4 and Ice Lake do not
// have. BASALT_Q8_VNNI adds avx512vnni (EVEX) to this pass, and kernels_hwy.cpp adds it to the
// functions that inline these (BASALT_Q8_VNNI_TARGET after each HWY_BEFORE_NAMESPACE). Only
// 512-bit forms are used, which exist only as EVEX. GCC only: elsewhere the multiply-adds
// take the two-instruction form (same integers).
#undef BASALT_Q8_VNNI
#undef BASALT_Q8_VNNI_TARGET
#if BASALT_Q8_X86 && HWY_TARGET <= HWY_AVX3_DL && defined(__GNUC__) && !defined(__clang__)
#define BASALT_Q8_VNNI 1
#define BASALT_Q8_VNNI_TARGET() _Pragma("GCC target(\"avx512vnni\")")
#else
#define BASALT_Q8_VNNI_TARGET()
#endif

HWY_BEFORE_NAMESPACE();
BASALT_Q8_VNNI_TARGET()
namespace basalt::cpu {
namespace HWY_NAMESPACE {
namespace q8 {

// Bytes of one 256-element block of a K type (dtype_block_bytes, as a compile-time constant).
constexpr int KBlockBytes(DType t) {
  return t == DType::Q4_K ? 144 : t == DType::Q5_K ? 176 : 210;
}

HWY_INLINE uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 6-bit scales and mins of a Q4_K / Q5_K block (ref::k_scale_min for all j at once):
// bytes 0..3 of sc = scales 0..3, 4..7 = scales 4..7; the same for m.
HWY_INLINE void KScales(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  const uint32_t a = U32(s), b = U32(s + 4), c = U32(s + 8);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  const uint32_t sc_lo = a & lo6, m_lo = b & lo6;
  const uint32_t sc_hi = (c & lo4) | (((a >> 6) & lo2) << 4);
  const uint32_t m_hi = ((c >> 4) & lo4) | (((b >> 6) & lo2) << 4);
  std::memcpy(sc, &sc_lo, 4), std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(m, &m_lo, 4), std::memcpy(m + 4, &m_hi, 4);
}

#if BASALT_Q8_X86
// ---------------------------------------------------------------- x86, 256-bit

HWY_INLINE float F16x(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact, as f16_to_f32
}

// A K-type block's scales, unpacked once per weight row and block for all activation rows.
struct KBlockX {
  const uint8_t* b;
  float d, dmin;
  __m256i sc_lo, sc_hi;  // i16 scales: Q4_K/Q5_K: the 8 in both halves (sc_hi unused);
                         // Q6_K: scales 0..7 (sc_lo) and 8..15 (sc_hi) in both halves
  __m256i mins;          // madd with a block's s16 gives M(l) (before Q6_K's · 32)
};
template <DType kType>
HWY_INLINE void PrepareKX(const uint8_t* b, KBlockX& k) {
  k.b = b;
  if constexpr (kType == DType::Q6_K) {
    k.d = F16x(b + 208), k.dmin = 0.0f;
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    k.sc_lo = _mm256_permute2x128_si256(s16, s16, 0x00);
    k.sc_hi = _mm256_permute2x128_si256(s16, s16, 0x11);
    k.mins = s16;
  } else {
    k.d = F16x(b), k.dmin = F16x(b + 2);
    alignas(16) uint8_t sc[16], m[16];
    KScales(b + 4, sc, m);
    const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
    const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m));
    k.sc_lo = k.sc_hi = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
    k.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));  // m0 m0 m1 m1 ... m7 m7
  }
}

// Codes of sub-block j (32 elements) as unsigned bytes.
template <DType kType>
HWY_INLINE __m256i SubCodes(const KBlockX& k, int j) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (kType == DType::Q4_K) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 16 + 32 * (j / 2)));
    return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
  } else if constexpr (kType == DType::Q5_K) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 48 + 32 * (j / 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 16));
    const __m256i lo = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  } else {  // Q6_K
    const int h = j / 4, q = j % 4;
    const __m256i l =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 64 * h + 32 * (q & 1)));
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 128 + 32 * h));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, 4 * (q >> 1)), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * q), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
}
// Sub-block j's integer scale per i16 lane (elements 0..15 in lanes 0..7, 16..31 in 8..15).
template <DType kType>
HWY_INLINE __m256i SubScale(const KBlockX& k, int j) {
  if constexpr (kType == DType::Q6_K) {  // scales 2j (low half) and 2j+1 (high half)
    const int i = 2 * (j % 4);           // their lane within sc_lo / sc_hi
    const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(int16_t(((2 * i + 3) << 8) | (2 * i + 2))),
                                          _mm_set1_epi16(int16_t(((2 * i + 1) << 8) | (2 * i))));
    return _mm256_shuffle_epi8(j < 4 ? k.sc_lo : k.sc_hi, pick);
  } else {
    return _mm256_shuffle_epi8(k.sc_lo, _mm256_set1_epi16(int16_t(((2 * j + 1) << 8) | (2 * j))));
  }
}

// R activation rows × C weight rows over K-type blocks.
template <int R, int C, DType kType>
HWY_INLINE void TileK(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                      int64_t ldy) {
  constexpr int kBytes = KBlockBytes(kType);
  const int64_t blocks = a.K / 256;
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* xs[R];
  for (int r = 0; r < R; ++r) xq[r] = a.row_q(t0 + r), xd[r] = a.row_d(t0 + r), xs[r] = a.row_s16(t0 + r);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    KBlockX kb[C];
    for (int c = 0; c < C; ++c) {
      const uint8_t* b = w[c] + blk * kBytes;
      for (int o = 0; o < kBytes; o += 64) hwy::Prefetch(b + 2048 + o);
      PrepareKX<kType>(b, kb[c]);
    }
    __m256i isum[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) isum[r][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      for (int c = 0; c < C; ++c) {
        const __m256i wv = SubCodes<kType>(kb[c], j), sv = SubScale<kType>(kb[c], j);
        for (int r = 0; r < R; ++r) {
          const __m256i xv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + blk * 256 + 32 * j));
          isum[r][c] =
              _mm256_add_epi32(isum[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), sv));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = xd[r][blk];
      const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[r] + blk * 16));
      for (int c = 0; c < C; ++c) {
        const float s = kb[c].d * dx;
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
        __m256i M = _mm256_madd_epi16(kb[c].mins, s16);
        if constexpr (kType == DType::Q6_K) M = _mm256_slli_epi32(M, 5);
        const float sm = kType == DType::Q6_K ? s : kb[c].dmin * dx;
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(-sm), _mm256_cvtepi32_ps(M), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      alignas(32) float l[8];
      _mm256_store_ps(l, acc[r][c]);
      y[r * ldy + c] = ref::q8_tree8(l);
    }
}

#if HWY_TARGET <= HWY_AVX3
// 512-bit (AVX-512 targets): sub-blocks 2k and 2k+1 side by side, 2k in the low 256 bits.
// Both multiply steps then run on whole vectors (on Zen 5 and Intel's AVX-512 cores, twice the
// work of a 256-bit instruction), and the two halves are added, as integers, once per block:
// lane l gets Σ_j sc(j) · P(j, l) over all 8 sub-blocks, the same I(l) as the 256-bit tile.
struct KBlock512 {
  const uint8_t* b;
  float d, dmin;
  __m512i sc;    // i16 scales in lanes 0..7 (Q4_K / Q5_K) or 0..15 (Q6_K)
  __m256i mins;  // as KBlockX::mins
};
template <DType kType>
HWY_INLINE void PrepareK512(const uint8_t* b, KBlock512& k) {
  k.b = b;
  if constexpr (kType == DType::Q6_K) {
    k.d = F16x(b + 208), k.dmin = 0.0f;
    const __m256i s16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    k.sc = _mm512_castsi256_si512(s16);
    k.mins = s16;
  } else {
    k.d = F16x(b), k.dmin = F16x(b + 2);
    alignas(16) uint8_t sc[16], m[16];
    KScales(b + 4, sc, m);
    const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
    const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m));
    k.sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(s8));
    k.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
  }
}
// Codes of sub-blocks 2k (low half) and 2k+1 (high half) as unsigned bytes.
template <DType kType>
HWY_INLINE __m512i PairCodes(const KBlock512& k, int p) {
  if constexpr (kType == DType::Q4_K) {  // one 32-byte load: low nibbles 2k, high nibbles 2k+1
    const __m512i v = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b + 16 + 32 * p)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xffff0000u, v, 4), _mm512_set1_epi8(0x0f));
  } else {
    const KBlockX kx{k.b, 0.0f, 0.0f, {}, {}, {}};
    return _mm512_inserti64x4(_mm512_castsi256_si512(SubCodes<kType>(kx, 2 * p)),
                              SubCodes<kType>(kx, 2 * p + 1), 1);
  }
}
// The scale of each i16 lane of PairCodes' maddubs products (lane i: elements 2i, 2i+1).
template <DType kType>
HWY_INLINE __m512i PairScale(const KBlock512& k, int p) {
  if constexpr (kType == DType::Q6_K) {  // 16 elements per scale: lanes 8i .. 8i+7 take 4p + i
    const __m512i idx = _mm512_add_epi16(
        _mm512_set1_epi16(int16_t(4 * p)),
        _mm512_set_epi64(0x0003000300030003, 0x0003000300030003, 0x0002000200020002,
                         0x0002000200020002, 0x0001000100010001, 0x0001000100010001, 0, 0));
    return _mm512_permutexvar_epi16(idx, k.sc);
  } else {  // one scale per sub-block
    const __m512i idx =
        _mm512_mask_set1_epi16(_mm512_set1_epi16(int16_t(2 * p)), 0xffff0000u, int16_t(2 * p + 1));
    return _mm512_permutexvar_epi16(idx, k.sc);
  }
}

// Two weight rows (columns c, c+1) side by side: sub-block j of column c in the low 256 bits,
// of column c+1 in the high 256 bits, against sub-block j of the activation row in both halves.
// Each half's lanes then hold that column's I(l) and the per-block float steps run on both
// columns at once (lanes 0..7: c, 8..15: c+1), the same fmas per lane as the 256-bit tile.
struct KPair512 {
  const uint8_t* b[2];
  __m512 d, dmin;  // d (dmin) of c in lanes 0..7, of c+1 in 8..15
  __m512i sc;      // i16 scales: c's in lanes 0..15 (Q4_K / Q5_K: 0..7), c+1's from lane 16
  __m512i mins;    // KBlockX::mins of c, then of c+1
};
template <DType kType>
HWY_INLINE void PrepareKPair(const uint8_t* b0, const uint8_t* b1, KPair512& k) {
  k.b[0] = b0, k.b[1] = b1;
  if constexpr (kType != DType::Q6_K) {  // KScales for both rows in one 128-bit lane each
    // Per lane the dwords [a, b, c, ·] of the 12 scale bytes (b + 4 .. b + 15; the 4 bytes
    // after them are codes of the same block, unused).
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 4))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 4)), 1);
    const __m256i ab = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0));  // a b a b
    const __m256i cc = _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));  // c c c c
    const __m256i lo = _mm256_and_si256(ab, _mm256_set1_epi8(0x3f));      // sc_lo m_lo · ·
    const __m256i hi = _mm256_or_si256(                                   // · · sc_hi m_hi
        _mm256_and_si256(_mm256_srlv_epi32(cc, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                         _mm256_set1_epi8(0x0f)),
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(ab, 6), _mm256_set1_epi8(0x03)), 4));
    // bytes 0..7: scales 0..7, bytes 8..15: mins 0..7
    const __m256i sm =
        _mm256_shuffle_epi32(_mm256_blend_epi32(lo, hi, 0xcc), _MM_SHUFFLE(3, 1, 2, 0));
    const __m256i sc16 = _mm256_unpacklo_epi8(sm, _mm256_setzero_si256());  // per row, as i16
    k.sc = _mm512_shuffle_i64x2(_mm512_castsi256_si512(sc16), _mm512_castsi256_si512(sc16), 0x50);
    k.mins = _mm512_cvtepu8_epi16(_mm256_unpackhi_epi8(sm, sm));  // m0 m0 m1 m1 … per row
    // d, dmin of both rows: [d0, dmin0, d1, dmin1]
    const __m128 dd = _mm_cvtph_ps(_mm_setr_epi32(int(U32(b0)), int(U32(b1)), 0, 0));
    const __m512 d4 = _mm512_castps128_ps512(dd);
    k.d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                d4);
    k.dmin = _mm512_permutexvar_ps(
        _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), d4);
    return;
  }
  KBlockX x[2];
  PrepareKX<kType>(b0, x[0]), PrepareKX<kType>(b1, x[1]);
  k.d = _mm512_insertf32x8(_mm512_set1_ps(x[0].d), _mm256_set1_ps(x[1].d), 1);
  k.dmin = _mm512_insertf32x8(_mm512_set1_ps(x[0].dmin), _mm256_set1_ps(x[1].dmin), 1);
  k.mins = _mm512_inserti64x4(_mm512_castsi256_si512(x[0].mins), x[1].mins, 1);
  if constexpr (kType == DType::Q6_K)  // x.mins is the 16 scales as i16
    k.sc = k.mins;
  else  // sc_lo holds the 8 scales in each 128-bit half
    k.sc = _mm512_inserti64x4(_mm512_castsi256_si512(x[0].sc_lo), x[1].sc_lo, 1);
}
// Sub-block j's codes of both columns.
template <DType kType>
HWY_INLINE __m512i PairColCodes(const KPair512& k, int j) {
  if constexpr (kType == DType::Q4_K) {
    const int o = 16 + 32 * (j / 2);
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b[0] + o))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.b[1] + o)), 1);
    return _mm512_and_si512(j & 1 ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(0x0f));
  } else {
    const KBlockX x0{k.b[0], 0.0f, 0.0f, {}, {}, {}}, x1{k.b[1], 0.0f, 0.0f, {}, {}, {}};
    return _mm512_inserti64x4(_mm512_castsi256_si512(SubCodes<kType>(x0, j)),
                              SubCodes<kType>(x1, j), 1);
  }
}
// The scale of each i16 lane of PairColCodes' maddubs products.
template <DType kType>
HWY_INLINE __m512i PairColScale(const KPair512& k, int j) {
  if constexpr (kType == DType::Q6_K) {  // lanes 0..7: scale 2j, 8..15: 2j+1, then c+1's
    const __m512i idx = _mm512_add_epi16(
        _mm512_set1_epi16(int16_t(2 * j)),
        _mm512_set_epi64(0x0011001100110011, 0x0011001100110011, 0x0010001000100010,
                         0x0010001000100010, 0x0001000100010001, 0x0001000100010001, 0, 0));
    return _mm512_permutexvar_epi16(idx, k.sc);
  } else {  // scale j of c (lane j of the low 128 bits), of c+1 (lane j + 16)
    return _mm512_shuffle_epi8(k.sc, _mm512_set1_epi16(int16_t(((2 * j + 1) << 8) | (2 * j))));
  }
}

// isum + the products of unsigned codes wv and activations xv, in adjacent pairs, times the
// i16 scales sv: vpdpwssd with VNNI, else vpmaddwd and the add (the same integers).
HWY_INLINE __m512i DotAddK(__m512i isum, __m512i wv, __m512i xv, __m512i sv) {
#if BASALT_Q8_VNNI
  return _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(wv, xv), sv);
#else
  return _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(wv, xv), sv));
#endif
}

template <int R, DType kType>
HWY_INLINE void TileK512x2(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                           int64_t ldy) {
  constexpr int kBytes = KBlockBytes(kType);
  const int64_t blocks = a.K / 256;
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* xs[R];
  for (int r = 0; r < R; ++r)
    xq[r] = a.row_q(t0 + r), xd[r] = a.row_d(t0 + r), xs[r] = a.row_s16(t0 + r);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* b0 = w[0] + blk * kBytes;
    const uint8_t* b1 = w[1] + blk * kBytes;
    for (int o = 0; o < kBytes; o += 64) hwy::Prefetch(b0 + 2048 + o), hwy::Prefetch(b1 + 2048 + o);
    KPair512 kp;
    PrepareKPair<kType>(b0, b1, kp);
    __m512i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i wv = PairColCodes<kType>(kp, j), sv = PairColScale<kType>(kp, j);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + blk * 256 + 32 * j)));
        isum[r] = DotAddK(isum[r], wv, xv, sv);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 dxv = _mm512_set1_ps(xd[r][blk]);
      const __m512 sv = _mm512_mul_ps(kp.d, dxv);
      acc[r] = _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(isum[r]), acc[r]);
      __m512i M = _mm512_madd_epi16(
          kp.mins, _mm512_broadcast_i64x4(
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[r] + blk * 16))));
      if constexpr (kType == DType::Q6_K) M = _mm512_slli_epi32(M, 5);
      const __m512 sm = kType == DType::Q6_K ? sv : _mm512_mul_ps(kp.dmin, dxv);
      acc[r] = _mm512_fnmadd_ps(sm, _mm512_cvtepi32_ps(M), acc[r]);  // fma(−sm, M, acc)
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float l[16];
    _mm512_store_ps(l, acc[r]);
    y[r * ldy] = ref::q8_tree8(l);
    y[r * ldy + 1] = ref::q8_tree8(l + 8);
  }
}

template <int R, DType kType>
HWY_INLINE void TileK512(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                         int64_t ldy) {
  constexpr int kBytes = KBlockBytes(kType);
  const int64_t blocks = a.K / 256;
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* xs[R];
  for (int r = 0; r < R; ++r)
    xq[r] = a.row_q(t0 + r), xd[r] = a.row_d(t0 + r), xs[r] = a.row_s16(t0 + r);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* b = w[0] + blk * kBytes;
    for (int o = 0; o < kBytes; o += 64) hwy::Prefetch(b + 8192 + o);
    KBlock512 kb;
    PrepareK512<kType>(b, kb);
    __m512i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i wv = PairCodes<kType>(kb, p), sv = PairScale<kType>(kb, p);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(xq[r] + blk * 256 + 64 * p);
        isum[r] = DotAddK(isum[r], wv, xv, sv);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = xd[r][blk];
      const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[r] + blk * 16));
      const __m256i I =
          _mm256_add_epi32(_mm512_castsi512_si256(isum[r]), _mm512_extracti64x4_epi64(isum[r], 1));
      const float s = kb.d * dx;
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(I), acc[r]);
      __m256i M = _mm256_madd_epi16(kb.mins, s16);
      if constexpr (kType == DType::Q6_K) M = _mm256_slli_epi32(M, 5);
      const float sm = kType == DType::Q6_K ? s : kb.dmin * dx;
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-sm), _mm256_cvtepi32_ps(M), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float l[8];
    _mm256_store_ps(l, acc[r]);
    y[r * ldy] = ref::q8_tree8(l);
  }
}
#endif

// Signed codes of a 32-element block.
template <DType kType>
HWY_INLINE __m256i Codes32(const uint8_t* b) {
  if constexpr (kType == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  } else {  // Q4_0: low nibbles are elements 0..15, high nibbles 16..31; minus 8
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
  }
}

template <int R, int C, DType kType>
HWY_INLINE void Tile32(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                       int64_t ldy) {
  constexpr int kBytes = kType == DType::Q8_0 ? 34 : 18;
  const int64_t blocks = a.K / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) xq[r] = a.row_q(t0 + r), xd[r] = a.row_d(t0 + r);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m256i aw[C], wv[C];
    __m256 dw[C];
    for (int c = 0; c < C; ++c) {
      const uint8_t* b = w[c] + blk * kBytes;
      if (blk % 2 == 0) hwy::Prefetch(b + 4096);
      dw[c] = _mm256_set1_ps(F16x(b));
      wv[c] = Codes32<kType>(b);
      aw[c] = _mm256_sign_epi8(wv[c], wv[c]);  // |w| (−128 reads as 128 unsigned)
    }
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + blk * 32));
      const __m256 dx = _mm256_broadcast_ss(xd[r] + blk);
      for (int c = 0; c < C; ++c) {
        const __m256i p =
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(xv, wv[c])), ones);
        // dw · dx in every lane: the same float product as the scalar one, one vector multiply
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], dx), _mm256_cvtepi32_ps(p), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      alignas(32) float l[8];
      _mm256_store_ps(l, acc[r][c]);
      y[r * ldy + c] = ref::q8_tree8(l);
    }
}

#if HWY_TARGET <= HWY_AVX3
// 32-element blocks, 512-bit: block b of column c in the low 256 bits, of c+1 in the high,
// against block b of the activation row in both halves. AVX-512 has no vpsignb: sign(x, w)
// is x with the lanes where w < 0 negated (x ≠ −128, so the negation is exact).
template <int R, DType kType>
HWY_INLINE void Tile32x2(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                         int64_t ldy) {
  constexpr int kBytes = kType == DType::Q8_0 ? 34 : 18;
  const int64_t blocks = a.K / 32;
  const int8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) xq[r] = a.row_q(t0 + r), xd[r] = a.row_d(t0 + r);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* b0 = w[0] + blk * kBytes;
    const uint8_t* b1 = w[1] + blk * kBytes;
    if (blk % 2 == 0) hwy::Prefetch(b0 + 1024), hwy::Prefetch(b1 + 1024);
    const __m512 dw = _mm512_insertf32x8(_mm512_set1_ps(F16x(b0)), _mm256_set1_ps(F16x(b1)), 1);
    const __m512i wv =
        _mm512_inserti64x4(_mm512_castsi256_si512(Codes32<kType>(b0)), Codes32<kType>(b1), 1);
    const __m512i aw = _mm512_abs_epi8(wv);  // |w| (−128 reads as 128 unsigned)
    const __mmask64 neg = _mm512_movepi8_mask(wv);
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + blk * 32)));
      const __m512i sx = _mm512_mask_sub_epi8(xv, neg, zero, xv);
#if BASALT_Q8_VNNI  // the 4-element lane sums in one instruction
      const __m512i p = _mm512_dpbusd_epi32(zero, aw, sx);
#else
      const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1));
#endif
      // dw · dx in every lane: the same float product as the scalar one
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xd[r][blk])), _mm512_cvtepi32_ps(p),
                               acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float l[16];
    _mm512_store_ps(l, acc[r]);
    y[r * ldy] = ref::q8_tree8(l);
    y[r * ldy + 1] = ref::q8_tree8(l + 8);
  }
}
#endif

#elif BASALT_Q8_NEON
// ---------------------------------------------------------------- Arm64 NEON

// A K-type block's header, decoded once per weight row and block.
struct KBlock {
  float d = 0, dmin = 0;
  uint8_t sc[8], m[8];
  int8_t sc6[16];
  const uint8_t* b = nullptr;
};
template <DType kType>
HWY_INLINE void PrepareK(const uint8_t* b, KBlock& k) {
  k.b = b;
  if constexpr (kType == DType::Q6_K) {
    k.d = ref::load_f16(b + 208);
    std::memcpy(k.sc6, b + 192, 16);
  } else {
    k.d = ref::load_f16(b), k.dmin = ref::load_f16(b + 2);
    KScales(b + 4, k.sc, k.m);
  }
}

// Σ over lanes of 4 elements of 16 byte products: lane m = elements 4m .. 4m+3.
HWY_INLINE int32x4_t Dot16(int8x16_t w, int8x16_t x) {
  const int16x8_t p0 = vmull_s8(vget_low_s8(w), vget_low_s8(x));
  const int16x8_t p1 = vmull_high_s8(w, x);
  return vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1));
}
HWY_INLINE uint8x16_t Shr(uint8x16_t v, int s) {
  return vshlq_u8(v, vdupq_n_s8(int8_t(-s)));
}

template <DType kType>
HWY_INLINE void SubCodes(const KBlock& k, int j, int8x16_t* lo, int8x16_t* hi) {
  const uint8x16_t m4 = vdupq_n_u8(15);
  uint8x16_t v[2];
  for (int half = 0; half < 2; ++half) {
    const int o = 16 * half;
    if constexpr (kType == DType::Q4_K) {
      v[half] = vandq_u8(Shr(vld1q_u8(k.b + 16 + 32 * (j / 2) + o), 4 * (j & 1)), m4);
    } else if constexpr (kType == DType::Q5_K) {
      const uint8x16_t l = vandq_u8(Shr(vld1q_u8(k.b + 48 + 32 * (j / 2) + o), 4 * (j & 1)), m4);
      const uint8x16_t h = vandq_u8(Shr(vld1q_u8(k.b + 16 + o), j), vdupq_n_u8(1));
      v[half] = vorrq_u8(l, vshlq_n_u8(h, 4));
    } else {
      const int hh = j / 4, q = j % 4;
      const uint8x16_t l =
          vandq_u8(Shr(vld1q_u8(k.b + 64 * hh + 32 * (q & 1) + o), 4 * (q >> 1)), m4);
      const uint8x16_t h = vandq_u8(Shr(vld1q_u8(k.b + 128 + 32 * hh + o), 2 * q), vdupq_n_u8(3));
      v[half] = vorrq_u8(l, vshlq_n_u8(h, 4));
    }
  }
  *lo = vreinterpretq_s8_u8(v[0]);
  *hi = vreinterpretq_s8_u8(v[1]);
}

template <int R, int C, DType kType>
HWY_INLINE void TileK(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                      int64_t ldy) {
  constexpr int kBytes = KBlockBytes(kType);
  const int64_t blocks = a.K / 256;
  float32x4_t acc[R][C][2];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0.0f);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    KBlock kb[C];
    for (int c = 0; c < C; ++c) PrepareK<kType>(w[c] + blk * kBytes, kb[c]);
    int32x4_t isum[R][C][2];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) isum[r][c][0] = isum[r][c][1] = vdupq_n_s32(0);
    for (int j = 0; j < 8; ++j) {
      int8x16_t xl[R], xh[R];
      for (int r = 0; r < R; ++r) {
        const int8_t* xp = a.row_q(t0 + r) + blk * 256 + 32 * j;
        xl[r] = vld1q_s8(xp), xh[r] = vld1q_s8(xp + 16);
      }
      for (int c = 0; c < C; ++c) {
        int8x16_t wl, wh;
        SubCodes<kType>(kb[c], j, &wl, &wh);
        const int s0 = kType == DType::Q6_K ? kb[c].sc6[2 * j] : kb[c].sc[j];
        const int s1 = kType == DType::Q6_K ? kb[c].sc6[2 * j + 1] : kb[c].sc[j];
        for (int r = 0; r < R; ++r) {
          isum[r][c][0] = vmlaq_n_s32(isum[r][c][0], Dot16(wl, xl[r]), s0);
          isum[r][c][1] = vmlaq_n_s32(isum[r][c][1], Dot16(wh, xh[r]), s1);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = a.row_d(t0 + r)[blk];
      const int16_t* s16 = a.row_s16(t0 + r) + blk * 16;
      const int16x8_t s_lo = vld1q_s16(s16), s_hi = vld1q_s16(s16 + 8);
      for (int c = 0; c < C; ++c) {
        const float s = kb[c].d * dx;
        int32x4_t M[2];
        if constexpr (kType == DType::Q6_K) {  // M(l) = 32 · (sc[2l] s16[2l] + sc[2l+1] s16[2l+1])
          const int16x8_t sc_lo = vmovl_s8(vld1_s8(kb[c].sc6)), sc_hi = vmovl_s8(vld1_s8(kb[c].sc6 + 8));
          M[0] = vshlq_n_s32(vpaddq_s32(vmull_s16(vget_low_s16(sc_lo), vget_low_s16(s_lo)),
                                        vmull_high_s16(sc_lo, s_lo)), 5);
          M[1] = vshlq_n_s32(vpaddq_s32(vmull_s16(vget_low_s16(sc_hi), vget_low_s16(s_hi)),
                                        vmull_high_s16(sc_hi, s_hi)), 5);
        } else {  // M(l) = m(l) · (s16[2l] + s16[2l+1])
          const uint16x8_t m16 = vmovl_u8(vld1_u8(kb[c].m));
          M[0] = vmulq_s32(vpaddlq_s16(s_lo), vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m16))));
          M[1] = vmulq_s32(vpaddlq_s16(s_hi), vreinterpretq_s32_u32(vmovl_high_u16(m16)));
        }
        const float sm = kType == DType::Q6_K ? s : kb[c].dmin * dx;
        for (int h = 0; h < 2; ++h) {
          acc[r][c][h] = vfmaq_f32(acc[r][c][h], vdupq_n_f32(s), vcvtq_f32_s32(isum[r][c][h]));
          acc[r][c][h] = vfmaq_f32(acc[r][c][h], vdupq_n_f32(-sm), vcvtq_f32_s32(M[h]));
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float l[8];
      vst1q_f32(l, acc[r][c][0]), vst1q_f32(l + 4, acc[r][c][1]);
      y[r * ldy + c] = ref::q8_tree8(l);
    }
}

template <int R, int C, DType kType>
HWY_INLINE void Tile32(const ref::Q8Acts& a, int64_t t0, const uint8_t* const* w, float* y,
                       int64_t ldy) {
  constexpr int kBytes = kType == DType::Q8_0 ? 34 : 18;
  const int64_t blocks = a.K / 32;
  float32x4_t acc[R][C][2];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0.0f);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int8x16_t wl[C], wh[C];
    float dw[C];
    for (int c = 0; c < C; ++c) {
      const uint8_t* b = w[c] + blk * kBytes;
      dw[c] = ref::load_f16(b);
      if constexpr (kType == DType::Q8_0) {
        wl[c] = vld1q_s8(reinterpret_cast<const int8_t*>(b + 2));
        wh[c] = vld1q_s8(reinterpret_cast<const int8_t*>(b + 18));
      } else {
        const uint8x16_t v = vld1q_u8(b + 2);
        const int8x16_t eight = vdupq_n_s8(8);
        wl[c] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
        wh[c] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int8_t* xp = a.row_q(t0 + r) + blk * 32;
      const int8x16_t xl = vld1q_s8(xp), xh = vld1q_s8(xp + 16);
      const float dx = a.row_d(t0 + r)[blk];
      for (int c = 0; c < C; ++c) {
        const float32x4_t s = vdupq_n_f32(dw[c] * dx);
        acc[r][c][0] = vfmaq_f32(acc[r][c][0], s, vcvtq_f32_s32(Dot16(wl[c], xl)));
        acc[r][c][1] = vfmaq_f32(acc[r][c][1], s, vcvtq_f32_s32(Dot16(wh[c], xh)));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float l[8];
      vst1q_f32(l, acc[r][c][0]), vst1q_f32(l + 4, acc[r][c][1]);
      y[r * ldy + c] = ref::q8_tree8(l);
    }
}
#endif

// y[t, n] for t in [t0, t1), n in [n0, n1).
template <DType kType>
HWY_INLINE void MatmulQ8T(const ref::Q8Acts& a, int64_t t0, int64_t t1, const WeightRef& w,
                          int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const auto* p = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = int64_t(dtype_bytes(kType, w.cols)), T = t1;
#if BASALT_Q8_X86 || BASALT_Q8_NEON
  constexpr bool k256 = kType == DType::Q4_K || kType == DType::Q5_K || kType == DType::Q6_K;
  auto tile = [&]<int R, int C>(int64_t t, const uint8_t* const* rows, float* yt) {
#if BASALT_Q8_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (k256 && C == 2)
      TileK512x2<R, kType>(a, t, rows, yt, ldy);
    else if constexpr (k256)
      TileK512<R, kType>(a, t, rows, yt, ldy);
    else if constexpr (C == 2)
      Tile32x2<R, kType>(a, t, rows, yt, ldy);
    else
      Tile32<R, C, kType>(a, t, rows, yt, ldy);
#else
    if constexpr (k256)
      TileK<R, C, kType>(a, t, rows, yt, ldy);
    else
      Tile32<R, C, kType>(a, t, rows, yt, ldy);
#endif
  };
  // Tiles of 8 (AVX-512) or 4 activation rows, then single rows. Columns go in pairs (the
  // AVX-512 tiles, and the 32-element types everywhere) except for single rows: at T = 1 the
  // weights stream from memory, and one row after another reads them as one sequential stream,
  // faster than two rows side by side (about 2× at one thread on the EPYC of bench/RESULTS.md).
#if BASALT_Q8_X86 && HWY_TARGET <= HWY_AVX3
  constexpr bool wide = true;
#else
  constexpr bool wide = false;
#endif
  auto row_tiles = [&]<int R>(int64_t t, int64_t nc, const uint8_t* const* rows, float* yt) {
    int64_t c = 0;
    if constexpr ((wide || !k256) && R > 1)
      for (; c + 2 <= nc; c += 2) tile.template operator()<R, 2>(t, rows + c, yt + c);
    for (; c < nc; ++c) tile.template operator()<R, 1>(t, rows + c, yt + c);
  };
  for (int64_t n = n0; n < n1; n += 4) {  // groups of 4 columns share each tile of x rows
    const int64_t nc = std::min<int64_t>(4, n1 - n);
    const uint8_t* rows[4];
    for (int64_t c = 0; c < nc; ++c) rows[c] = p + (n + c) * row_bytes;
    int64_t t = t0;
    if constexpr (wide)
      for (; t + 8 <= T; t += 8) row_tiles.template operator()<8>(t, nc, rows, y + t * ldy + n);
    for (; t + 4 <= T; t += 4) row_tiles.template operator()<4>(t, nc, rows, y + t * ldy + n);
    for (; t < T; ++t) row_tiles.template operator()<1>(t, nc, rows, y + t * ldy + n);
  }
#else
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t t = t0; t < T; ++t) y[t * ldy + n] = ref::q8_dot(kType, p + n * row_bytes, a, t);
#endif
}

HWY_INLINE void MatmulQ8(const ref::Q8Acts& a, int64_t t0, int64_t t1, const WeightRef& w,
                         int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::Q8_0:
      return MatmulQ8T<DType::Q8_0>(a, t0, t1, w, n0, n1, y, ldy);
    case DType::Q4_0:
      return MatmulQ8T<DType::Q4_0>(a, t0, t1, w, n0, n1, y, ldy);
    case DType::Q4_K:
      return MatmulQ8T<DType::Q4_K>(a, t0, t1, w, n0, n1, y, ldy);
    case DType::Q5_K:
      return MatmulQ8T<DType::Q5_K>(a, t0, t1, w, n0, n1, y, ldy);
    case DType::Q6_K:
      return MatmulQ8T<DType::Q6_K>(a, t0, t1, w, n0, n1, y, ldy);
    default:
      HWY_ABORT("q8 matmul: weight dtype %s", std::string(dtype_name(w.dtype)).c_str());
  }
}

}  // namespace q8
}  // namespace HWY_NAMESPACE
}  // namespace basalt::cpu
HWY_AFTER_NAMESPACE();

#endif  // BASALT_MATMUL_Q8_INL_H_
