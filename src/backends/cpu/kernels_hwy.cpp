// Compiled once per SIMD target by Highway's foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_hwy.h"
#include "backends/cpu/matmul_q8-inl.h"
#include "backends/cpu/matmul_quant-inl.h"
#include "core/dtype.h"
#include "ops/ref/scaled.h"

HWY_BEFORE_NAMESPACE();
BASALT_Q8_VNNI_TARGET()  // matmul_q8-inl.h
namespace basalt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Loads lanes k .. k+L-1 of one weight row (or KV cache row) as f32, L the lanes of the f32
// tag D (DF, or a narrower one).
struct RowF32 {
  const float* p;
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t k) const {
    return hn::LoadU(d, p + k);
  }
  HWY_INLINE float at(int64_t k) const { return p[k]; }
};
struct RowBF16 {
  const hwy::bfloat16_t* p;
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t k) const {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, p + k));
  }
  HWY_INLINE float at(int64_t k) const {
    uint16_t u;
    std::memcpy(&u, p + k, 2);
    return bf16_to_f32(u);
  }
};
struct RowF16 {
  const hwy::float16_t* p;
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t k) const {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, p + k));
  }
  HWY_INLINE float at(int64_t k) const {
    uint16_t u;
    std::memcpy(&u, p + k, 2);
    return f16_to_f32(u);
  }
};
// f(std::integral_constant<int, k>()) for a run-time k in 1..Max (nothing for k outside): a
// tile or chunk width picked at run time, compiled for each.
template <int Max, class F>
HWY_INLINE void WithCount(int64_t k, F&& f) {
  if constexpr (Max > 0) {
    if (k == Max)
      f(std::integral_constant<int, Max>());
    else
      WithCount<Max - 1>(k, f);
  }
}

// out[i] = GetLane(SumOfLanes(acc[i])) for i < N, bit for bit. On AVX2 that tree is
// ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)); eight accumulators at a time go through
// the same additions transposed (7 shuffles and 7 adds for eight sums instead of 4 + 4 each),
// which matters where K is a few vectors (64-wide models: the sums were half a tile's work).
template <int N>
HWY_INLINE void SumsOfLanes(const hn::Vec<DF>* acc, float* out) {
  const DF d;
#if HWY_TARGET == HWY_AVX2
  int i = 0;
  if constexpr (N >= 4) {
    for (; i < N; i += 8) {
      __m256 v[8];
      for (int j = 0; j < 8; ++j) v[j] = i + j < N ? acc[i + j].raw : _mm256_setzero_ps();
      __m256 u[4], p[2];
      for (int j = 0; j < 4; ++j)  // lanes i and i + 4 of two accumulators: [u_a | u_b]
        u[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
      for (int j = 0; j < 2; ++j)  // [u0 + u2 of a, of c, u1 + u3 of a, of c | b, d]
        p[j] = _mm256_add_ps(_mm256_unpacklo_ps(u[2 * j], u[2 * j + 1]),
                             _mm256_unpackhi_ps(u[2 * j], u[2 * j + 1]));
      const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
      HWY_ALIGN float f[8];  // accumulators 0, 2, 4, 6 | 1, 3, 5, 7
      _mm256_store_ps(f, r);
      constexpr int kAt[8] = {0, 4, 1, 5, 2, 6, 3, 7};
      for (int j = 0; j < 8 && i + j < N; ++j) out[i + j] = f[kAt[j]];
    }
  }
  for (; i < N; ++i) out[i] = hn::GetLane(hn::SumOfLanes(d, acc[i]));
#else
  for (int i = 0; i < N; ++i) out[i] = hn::GetLane(hn::SumOfLanes(d, acc[i]));
#endif
}

// R rows of x against C rows of W, one vector accumulator per (r, c) pair. Per pair the
// schedule is fixed: the vector steps k = 0, L, 2L… in order into that accumulator (one fma per
// lane and step), then the scalar tail in order (std::fma: written out, since whether the
// compiler contracted `tail += x · w` depended on the row type, and a bf16 KV cache must give
// the f32 cache's bits), then sum(acc) + tail. The weight vector a step
// loads is used by every row of the tile (and x's by every column), so a 2 × 6 tile makes 12
// fmas from 2 + 6 loads.
// kStreamNext (decode over a weight matrix, whose rows lie one after another, K elements
// each): every step also prefetches the same span of the next C rows.
template <int R, int C, bool kStreamNext = false, class Row>
HWY_INLINE void Tile(const float* x, int64_t ldx, const Row* rows, int64_t K, float* y,
                     int64_t ldy) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  hn::Vec<DF> a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = hn::Zero(d);
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    hn::Vec<DF> xv[R];
    for (int r = 0; r < R; ++r) xv[r] = hn::LoadU(d, x + r * ldx + k);
    if constexpr (R == 1 && kStreamNext) {
      constexpr int64_t E = sizeof(*rows[0].p);
      const char* next = reinterpret_cast<const char*>(rows[0].p) + C * (K + k) * E;
      for (int64_t o = 0; o < C * L * E; o += 64) hwy::Prefetch(next + o);
    }
    for (int c = 0; c < C; ++c) {
      const auto wv = rows[c].load(d, k);
      for (int r = 0; r < R; ++r) a[r][c] = hn::MulAdd(xv[r], wv, a[r][c]);
    }
  }
  float sums[R * C];
  SumsOfLanes<R * C>(&a[0][0], sums);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float tail = 0.0f;
      for (int64_t j = k; j < K; ++j) tail = std::fma(x[r * ldx + j], rows[c].at(j), tail);
      y[r * ldy + c] = sums[r * C + c] + tail;
    }
  }
}

// Tiles of 2 rows of x × 6 weight rows (12 accumulators, 2 x vectors and one weight vector: 15
// of AVX2's 16 registers); a pass walks the columns in groups of 6 and, per group, every pair of
// rows of an x block of at most 256 KiB, so the group's weights stay in L1 while x streams from
// L2. Measured on a 2-core AVX2 EPYC (f16 weights, f32 x, 3072 × 1024 and 1024 × 3072, one
// thread): 2 × 6 at 79-90 GFLOP/s (80-90 % of the FMA peak); 4 × 3 at 50-56 and 3 × 4 at 47
// (x streamed from L2 twice as often per fma); the previous two-accumulator 4 × 1 tiles at 43.
// AVX-512 (32 registers) runs 4 × 6 tiles first, each weight vector converted once for four
// rows (`bench_cpu_kernels` f16/bf16 T128 1.03-1.12× the 2 × 6 tiles on the AVX-512 EPYC).
// Decode (T = 1) runs 1 × 6 tiles: six independent fma chains over six weight streams, each
// step prefetching the same span of the next six rows (rows are contiguous, so one sequential
// stream a group ahead: `bench_cpu_kernels` T1 1.2-1.7× on the AVX-512 EPYC, where six
// interleaved streams left the hardware prefetcher behind). The tile shape never changes a
// dot product's schedule.
// `Panel`: weights whose decoding costs more than a load (FP8 and NVFP4 through tables) are
// decoded once per group of 6 rows into f32 (the same values load() returns) when the pass
// has more than 2 rows, then read as F32 rows.
template <class Row, bool Panel = false, class MakeRow>
HWY_INLINE void MatmulT(const float* x, int64_t T, int64_t K, int64_t n0, int64_t n1, float* y,
                        int64_t ldy, MakeRow make_row) {
  constexpr int kC = 6;
  const int64_t tb = std::max<int64_t>(2, ((int64_t(256) << 10) / std::max<int64_t>(K * 4, 1)) & ~1);
  // Weight rows lie one after another (make_row(n) = row n) for the f32/bf16/f16 rows.
  constexpr bool kContiguous =
      std::is_same_v<Row, RowF32> || std::is_same_v<Row, RowBF16> || std::is_same_v<Row, RowF16>;
  auto group = [&](const auto* rows, auto cols, int64_t n, auto stream) {
    constexpr int C = decltype(cols)::value;
    for (int64_t t0 = 0; t0 < T; t0 += tb) {
      const int64_t t1 = std::min(T, t0 + tb);
      int64_t t = t0;
#if HWY_TARGET <= HWY_AVX3  // 32 vector registers: 4 × 6 tiles (24 accumulators)
      for (; t + 4 <= t1; t += 4) Tile<4, C>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
#endif
      for (; t + 2 <= t1; t += 2) Tile<2, C>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
      if (t < t1) Tile<1, C, decltype(stream)::value>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
    }
  };
  thread_local std::vector<float> panel;
  int64_t n = n0;
  for (; n + kC <= n1; n += kC) {
    Row rows[kC];
    for (int c = 0; c < kC; ++c) rows[c] = make_row(n + c);
    if constexpr (Panel) {
      if (T > 2) {
        const DF d;
        const int64_t L = int64_t(hn::Lanes(d));
        panel.resize(size_t(kC * K));
        RowF32 f[kC];
        for (int c = 0; c < kC; ++c) {
          float* p = panel.data() + c * K;
          int64_t k = 0;
          for (; k + L <= K; k += L) hn::StoreU(rows[c].load(d, k), d, p + k);
          for (; k < K; ++k) p[k] = rows[c].at(k);
          f[c] = RowF32{p};
        }
        group(f, std::integral_constant<int, kC>(), n, std::false_type());  // the panel
        continue;
      }
    }
    group(rows, std::integral_constant<int, kC>(), n, std::bool_constant<kContiguous>());
  }
  // The last 1-5 columns as one narrower tile (as 1-column tiles they ran at a third of the
  // rate, and an 8-tasks-per-thread split leaves them in every task).
  Row rows[kC];
  for (int c = 0; c < n1 - n; ++c) rows[c] = make_row(n + c);
  WithCount<kC - 1>(n1 - n,
                    [&](auto cols) { group(rows, cols, n, std::bool_constant<kContiguous>()); });
}

// Scaled formats (ops/ref/scaled.h): y[t, n] = factor(n) · Σ_k inner(n, k) · x[t, k]. The inner
// values are decoded in registers (E4M3 and E2M1 codes by moving their bits into f16s, the
// E2M1 ones then times the group's E4M3 scale; the tables for scalar tails) with the products
// ref::scaled_inner_row forms, fed to Tile exactly as F32 weights, and each column is then
// multiplied by its factor:
// the same arithmetic for every T. A vector step never straddles an NVFP4 group (16) or an FP8
// block (a multiple of 16): lanes ≤ 16 and steps start at multiples of the lane count.
struct ScaledTables {
  float e4m3[256], e2m1[16];
  ScaledTables() {
    for (int c = 0; c < 256; ++c) e4m3[c] = fp8_e4m3_to_f32(uint8_t(c));
    for (int c = 0; c < 16; ++c) e2m1[c] = fp4_e2m1_to_f32(uint8_t(c));
  }
};
const ScaledTables& scaled_tables() {
  static const ScaledTables t;
  return t;
}

struct RowFp8 {  // inner = e4m3(q) · s(k / B) (no scales: s = 1)
  const uint8_t* q;
  const float* lut;
  const float* s;  // this row's block scales, or nullptr
  int64_t B;
  // E4M3 → f16 by moving the bits (exponent and mantissa into f16's, bias 7 → 15 fixed by the
  // exact ×2^8 after widening; f16 subnormals hold E4M3's), then the hardware f16 → f32
  // conversion: equal to the table for every finite code (the NaN codes read as ±480).
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t k) const {
    const hn::Rebind<uint16_t, D> d16;
    const hn::Rebind<hwy::float16_t, D> dh;
    const hn::Rebind<uint8_t, D> d8;
    const auto c = hn::PromoteTo(d16, hn::LoadU(d8, q + k));
    const auto bits = hn::Or(hn::ShiftLeft<7>(hn::And(c, hn::Set(d16, 0x7f))),
                             hn::ShiftLeft<8>(hn::And(c, hn::Set(d16, 0x80))));
    const auto v = hn::Mul(hn::PromoteTo(d, hn::BitCast(dh, bits)), hn::Set(d, 256.0f));
    return s ? hn::Mul(v, hn::Set(d, s[k / B])) : v;
  }
  HWY_INLINE float at(int64_t k) const { return s ? lut[q[k]] * s[k / B] : lut[q[k]]; }
};

struct RowNvfp4 {    // inner = e2m1(q) · e4m3(S[k / 16])
  const uint8_t* q;  // the row's packed codes
  const uint8_t* S;  // the row's group scales
  const ScaledTables* tb;
  // E2M1 → f16 by moving the bits (sign to bit 15, exponent and mantissa to bits 11..9: the
  // value · 2^-14, code 1 an f16 subnormal), the hardware f16 → f32 conversion, then one multiply
  // by the group scale · 2^14: e2m1 · e4m3 exactly (≤ 6 significant bits), the table's product.
  // The L / 2 bytes of L codes go to 32-bit lanes b; b | b << 12 masked holds the low nibble in
  // the lane's low 16 bits and the high nibble in its high 16 bits: codes in k order as 16-bit
  // lanes.
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const {
    if constexpr (hn::MaxLanes(DF()) >= 2) {
      const hn::Half<DF> dhalf;
      const hn::Rebind<uint8_t, decltype(dhalf)> d8;
      const hn::Rebind<uint32_t, decltype(dhalf)> d32;
      const hn::Rebind<uint16_t, DF> d16;
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto b = hn::PromoteTo(d32, hn::LoadU(d8, q + k / 2));
      const auto c =
          hn::BitCast(d16, hn::And(hn::Or(b, hn::ShiftLeft<12>(b)), hn::Set(d32, 0x000F000Fu)));
      const auto bits = hn::Or(hn::ShiftLeft<12>(hn::And(c, hn::Set(d16, 8))),
                               hn::ShiftLeft<9>(hn::And(c, hn::Set(d16, 7))));
      return hn::Mul(hn::PromoteTo(d, hn::BitCast(dh, bits)),
                     hn::Set(d, tb->e4m3[S[k / 16]] * 16384.0f));
    }
    const hn::Rebind<int32_t, DF> di;
    HWY_ALIGN int32_t idx[16];
    const int64_t L = int64_t(hn::Lanes(d));
    for (int64_t i = 0; i < L; ++i) {  // (k is even unless L is 1)
      const uint8_t b = q[(k + i) / 2];
      idx[i] = (k + i) % 2 ? b >> 4 : b & 15;
    }
    const auto v = hn::GatherIndex(d, tb->e2m1, hn::Load(di, idx));
    return hn::Mul(v, hn::Set(d, tb->e4m3[S[k / 16]]));
  }
  HWY_INLINE float at(int64_t k) const {
    const uint8_t b = q[k / 2];
    return tb->e2m1[k % 2 ? b >> 4 : b & 15] * tb->e4m3[S[k / 16]];
  }
};

void MatmulScaled(const float* x, int64_t T, const WeightRef& w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy) {
  const int64_t K = w.cols;
  const ScaledTables& tb = scaled_tables();
  const auto* q = static_cast<const uint8_t*>(w.data);
  if (w.dtype == DType::NVFP4) {
    const auto* S = static_cast<const uint8_t*>(w.scales);
    MatmulT<RowNvfp4, true>(x, T, K, n0, n1, y, ldy, [&](int64_t n) {
      return RowNvfp4{q + n * (K / 2), S + n * (K / 16), &tb};
    });
  } else {
    const bool blocks = w.scales && w.scale_block > 0;
    const int64_t B = blocks ? w.scale_block : 1, kb = blocks ? (K + B - 1) / B : 0;
    const auto* s = static_cast<const float*>(w.scales);
    MatmulT<RowFp8, true>(x, T, K, n0, n1, y, ldy, [&](int64_t n) {
      return RowFp8{q + n * K, tb.e4m3, blocks ? s + (n / B) * kb : nullptr, B};
    });
  }
  for (int64_t n = n0; n < n1; ++n) {
    const float f = ref::scaled_factor(w, n);
    for (int64_t t = 0; t < T; ++t) y[t * ldy + n] *= f;
  }
}

void MatmulRows(const float* x, int64_t T, const WeightRef& w, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const int64_t K = w.cols;
  switch (w.dtype) {
    case DType::NVFP4:
    case DType::F8_E4M3:
      MatmulScaled(x, T, w, n0, n1, y, ldy);
      break;
    case DType::F32: {
      const auto* p = static_cast<const float*>(w.data);
      MatmulT<RowF32>(x, T, K, n0, n1, y, ldy, [&](int64_t n) { return RowF32{p + n * K}; });
      break;
    }
    case DType::BF16: {
      const auto* p = static_cast<const hwy::bfloat16_t*>(w.data);
      MatmulT<RowBF16>(x, T, K, n0, n1, y, ldy, [&](int64_t n) { return RowBF16{p + n * K}; });
      break;
    }
    case DType::F16: {
      const auto* p = static_cast<const hwy::float16_t*>(w.data);
      MatmulT<RowF16>(x, T, K, n0, n1, y, ldy, [&](int64_t n) { return RowF16{p + n * K}; });
      break;
    }
    case DType::Q8_0:  // GGUF block types: matmul_quant-inl.h
      quant::MatmulQuant<quant::RowQ8_0>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q4_0:
      quant::MatmulQuant<quant::RowQ4_0>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q4_K:
      quant::MatmulQuant<quant::RowQ4K>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q5_K:
      quant::MatmulQuant<quant::RowQ5K>(x, T, w, n0, n1, y, ldy);
      break;
    case DType::Q6_K:
      quant::MatmulQuant<quant::RowQ6K>(x, T, w, n0, n1, y, ldy);
      break;
    default:
      break;  // rejected by CpuBackend::supports_weight before any call
  }
}

void MatmulQ8Rows(const ref::Q8Acts& a, int64_t t0, int64_t t1, const WeightRef& w, int64_t n0,
                  int64_t n1, float* y, int64_t ldy) {
  q8::MatmulQ8(a, t0, t1, w, n0, n1, y, ldy);
}

// ref::quantize_acts_rows in vectors: the same products x · (127 / amax), rounded to nearest
// even (hn::Round = std::nearbyint), clamped, so the same codes; a group with a non-finite value
// goes through the reference.
void QuantizeActsRows(const float* x, int64_t t0, int64_t t1, ref::Q8Acts& a) {
  const DF d;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t L = int64_t(hn::Lanes(d)), K = a.K, G = a.G;
  const auto lo = hn::Set(d, -127.0f), hi = hn::Set(d, 127.0f);
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * K;
    float* dq = a.d.data() + t * (K / G);
    int8_t* q = a.q.data() + t * K;
    for (int64_t g = 0; g < K / G; ++g) {
      const float* xg = xr + g * G;
      auto vmax = hn::Zero(d);
      auto finite = hn::IsFinite(hn::LoadU(d, xg));
      for (int64_t i = 0; i < G; i += L) {
        const auto v = hn::LoadU(d, xg + i);
        finite = hn::And(finite, hn::IsFinite(v));
        vmax = hn::Max(vmax, hn::Abs(v));
      }
      if (!hn::AllTrue(d, finite)) {
        ref::quantize_acts_group(xg, G, dq + g, q + g * G);
        continue;
      }
      const float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
      int8_t* qg = q + g * G;
      if (amax == 0.0f) {
        dq[g] = 0.0f;
        std::memset(qg, 0, size_t(G));
        continue;
      }
      dq[g] = amax / 127.0f;
      const auto id = hn::Set(d, 127.0f / amax);
      for (int64_t i = 0; i < G; i += L) {
        const auto r = hn::Min(hn::Max(hn::Round(hn::Mul(hn::LoadU(d, xg + i), id)), lo), hi);
        hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, qg + i);
      }
    }
    ref::acts_sums16(a, t);
  }
}

// s[j] = exp(s[j] - max s) for j < n: Highway's lane-wise exp, the last lanes through the same
// vector function.
HWY_INLINE void ExpMinusMax(float* s, int64_t n) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  const auto vm = hn::Set(d, m);
  int64_t j = 0;
  for (; j + L <= n; j += L) hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm)), d, s + j);
  if (j < n) {
    HWY_ALIGN float part[64];
    for (int64_t i = 0; i < L; ++i) part[i] = j + i < n ? s[j + i] : m;
    hn::Store(hn::Exp(d, hn::Sub(hn::Load(d, part), vm)), d, part);
    for (int64_t i = 0; j + i < n; ++i) s[j + i] = part[i];
  }
}

// AttendRows for a head dim of exactly N lanes narrower than the target's vectors (stories260K's
// 8 under AVX-512, where the full-width path found no whole vector and ran every dot and every
// value element as scalar tails): each score is one N-lane product summed across its lanes
// (SumOfLanes), and Σ_j p_j·vscale_j·v_j runs as one N-lane fma chain in key order, then × 1/sum.
// The softmax is AttendRows' (ExpMinusMax). A fixed schedule per (row, head), whatever the pass.
template <int N, class KeyRow, class ValueRow, class KScale, class VScale>
HWY_INLINE void AttendRowNarrow(const float* q, int64_t n, float scale, KeyRow krow, ValueRow vrow,
                                KScale kscale, VScale vscale, float* s, float* o) {
  const hn::CappedTag<float, N> dn;
  const auto vq = hn::LoadU(dn, q);
  for (int64_t j = 0; j < n; ++j)
    s[j] = hn::GetLane(hn::SumOfLanes(dn, hn::Mul(vq, krow(j).load(dn, 0)))) * kscale(j) * scale;
  ExpMinusMax(s, n);
  float sum = 0.0f;
  auto acc = hn::Zero(dn);
  for (int64_t j = 0; j < n; ++j) {
    sum += s[j];
    acc = hn::MulAdd(hn::Set(dn, s[j] * vscale(j)), vrow(j).load(dn, 0), acc);
  }
  hn::StoreU(hn::Mul(acc, hn::Set(dn, 1.0f / sum)), dn, o);
}

// Registers for accumulators: 32-register targets (AVX-512, NEON) take 4 query rows per score
// tile and 16 value accumulators, 16-register ones (AVX2, SSE4) 2 rows and 8.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || HWY_ARCH_ARM_A64
constexpr int kAttnRowTile = 4, kAttnAccs = 16;
#else
constexpr int kAttnRowTile = 2, kAttnAccs = 8;
#endif
// Rows of one sequence that AttentionTasks runs through AttendRows together.
constexpr int kAttnRows = kAttnRowsPerTask;

// o_r[off, off + NV·L) = inv_r · Σ_j w_r[j] · v_j over j < n[r] in j order, one fma per element
// and key, for R rows r (scores w_r at w + r·ldw, outputs at o + r·ldo); vrow(j) is a row type.
// Keys j < m (every row has them) load each value vector once for the R rows; each row's keys
// m..n[r]-1 follow on its own accumulators, so a row's chain is the same for any R.
template <int R, int NV, class ValueRow>
HWY_INLINE void WeightedRowsChunk(const float* w, int64_t ldw, int64_t m, const int64_t* n,
                                  ValueRow vrow, int64_t off, const float* inv, float* o,
                                  int64_t ldo) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  hn::Vec<DF> acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < NV; ++u) acc[r][u] = hn::Zero(d);
  for (int64_t j = 0; j < m; ++j) {
    const auto v = vrow(j);
    hn::Vec<DF> wv[R];
    for (int r = 0; r < R; ++r) wv[r] = hn::Set(d, w[r * ldw + j]);
    for (int u = 0; u < NV; ++u) {
      const auto x = v.load(d, off + u * L);
      for (int r = 0; r < R; ++r) acc[r][u] = hn::MulAdd(wv[r], x, acc[r][u]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = m; j < n[r]; ++j) {
      const auto v = vrow(j);
      const auto wv = hn::Set(d, w[r * ldw + j]);
      for (int u = 0; u < NV; ++u) acc[r][u] = hn::MulAdd(wv, v.load(d, off + u * L), acc[r][u]);
    }
    const auto iv = hn::Set(d, inv[r]);
    for (int u = 0; u < NV; ++u) hn::StoreU(hn::Mul(acc[r][u], iv), d, o + r * ldo + off + u * L);
  }
}

// R query rows of one sequence and one head of CpuBackend::attention (row r's query at
// q + r·ldq, its output at o + r·ldo, its scores at s + r·lds) over keys 0..n[r]-1. Keys and
// values come through krow/vrow as row types: RowF32, RowBF16 for a bf16 cache (values widen
// exactly: the f32 cache's arithmetic on the stored values) or RowFp8 for an FP8 cache; their
// scales through kscale/vscale (1 for f32 and bf16). Per row: scores as dot products with the
// matmul schedule (Tile: one accumulator per key), times the key's scale, times `scale`;
// softmax with the maximum, exp (Highway's, lane-wise) and the sum in key order; then
// Σ_j p_j·vscale_j·v_j in key order and one multiplication by 1/sum. The keys all R rows have
// (j < m = min n) go through R-row tiles, so each of those keys and values is loaded once for
// the R rows (a prompt's rows would re-read the whole cache per row otherwise); a tile's row
// count never changes a dot product's schedule, so a row's bits do not depend on R or on its
// neighbours.
template <int R, class KeyRow, class ValueRow, class KScale, class VScale>
HWY_INLINE void AttendRows(const float* q, int64_t ldq, int64_t D, const int64_t* n, float scale,
                           KeyRow krow, ValueRow vrow, KScale kscale, VScale vscale, float* s,
                           int64_t lds, float* o, int64_t ldo) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t m = n[0];
  for (int r = 1; r < R; ++r) m = std::min(m, n[r]);
  constexpr int kC = 6;
  int64_t j = 0;
  auto shared = [&](auto keys) {  // keys j .. j + C - 1 for every row
    constexpr int C = decltype(keys)::value;
    decltype(krow(0)) rows[C];
    for (int c = 0; c < C; ++c) rows[c] = krow(j + c);
    float dots[R * C];
    for (int r0 = 0; r0 < R; r0 += kAttnRowTile)
      WithCount<kAttnRowTile>(std::min(kAttnRowTile, R - r0), [&](auto nr) {
        Tile<decltype(nr)::value, C>(q + r0 * ldq, ldq, rows, D, dots + r0 * C, C);
      });
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) s[r * lds + j + c] = dots[r * C + c] * kscale(j + c) * scale;
  };
  for (; j + kC <= m; j += kC) shared(std::integral_constant<int, kC>());
  WithCount<kC - 1>(m - j, shared);
  float inv[R];
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * lds;
    auto own = [&](auto keys) {  // row r's keys j .. j + C - 1 past m
      constexpr int C = decltype(keys)::value;
      decltype(krow(0)) rows[C];
      float dots[C];
      for (int c = 0; c < C; ++c) rows[c] = krow(j + c);
      Tile<1, C>(q + r * ldq, D, rows, D, dots, 1);
      for (int c = 0; c < C; ++c) sr[j + c] = dots[c] * kscale(j + c) * scale;
    };
    for (j = m; j + kC <= n[r]; j += kC) own(std::integral_constant<int, kC>());
    WithCount<kC - 1>(n[r] - j, own);
    ExpMinusMax(sr, n[r]);
    float sum = 0.0f;
    for (j = 0; j < n[r]; ++j) {
      sum += sr[j];
      sr[j] *= vscale(j);
    }
    inv[r] = 1.0f / sum;
  }
  constexpr int kNV = kAttnAccs / R > 0 ? kAttnAccs / R : 1;
  int64_t off = 0;
  for (; off + kNV * L <= D; off += kNV * L)
    WeightedRowsChunk<R, kNV>(s, lds, m, n, vrow, off, inv, o, ldo);
  WithCount<kNV - 1>((D - off) / L, [&](auto nv) {
    WeightedRowsChunk<R, decltype(nv)::value>(s, lds, m, n, vrow, off, inv, o, ldo);
  });
  for (int r = 0; r < R; ++r)
    for (int64_t i = off + (D - off) / L * L; i < D; ++i) {  // dims past the last whole vector
      float acc = 0.0f;
      for (j = 0; j < n[r]; ++j) acc = std::fma(s[r * lds + j], vrow(j).at(i), acc);
      o[r * ldo + i] = acc * inv[r];
    }
}

// Tasks: (group of kAttnRows consecutive rows of the pass, head), i = g · H + h. Within a
// group, each run of rows of one sequence (the same block table) goes through AttendRows
// together; a run of one row (decode, a batch of decoding sequences) goes through AttendRows
// with the query heads that share its KV head as the rows (up to kAttnRows of them, run by the
// task of the first: the others skip it), so those heads load each key and value once where
// each head's task loaded them again (measured: 2 % less forward time serving 64 streams of the
// default model, G = 2; the reloads mostly hit the cache). The rows of a tile never change a
// dot product's schedule, so every head's bits are the same either way. Head
// dims of 4 or 8 below the vector width go row by row through AttendRowNarrow.
// FP8 caches read the codes in place (RowFp8 without block scales: the exact E4M3 values, as
// f32) and multiply each key's and value's scale in after its sum (kscale / vscale): the
// arithmetic of the scalar reference. The kv_fp8_encode codes are never NaN.
void AttentionTasks(const AttentionArgs& a, int64_t i0, int64_t i1) {
  const int64_t D = a.D, group = a.H / a.Hkv, HD = a.H * D;
  const bool fp8 = a.kv == DType::F8_E4M3, bf16 = a.kv == DType::BF16;
  const bool narrow = D < int64_t(hn::Lanes(DF())) && (D == 8 || D == 4);
  const int64_t step = a.Hkv * D * (fp8 ? 1 : bf16 ? 2 : 4);  // bytes from a position to the next
  thread_local std::vector<float> s;
  thread_local std::vector<const void*> kr, vr;   // keys / values 0..n-1 of a sequence (head 0)
  thread_local std::vector<const float*> ks, vs;  // FP8: their scales (head 0)
  const int32_t* built = nullptr;                 // the block table kr..vs were built for
  int64_t built_n = 0;
  // A one-row run's heads go together in sub-groups of hs: the first of each takes the others.
  const int64_t hs = std::min<int64_t>(group, kAttnRows);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t g = i / a.H, h = i % a.H, hk = h / group;
    const int64_t g0 = g * kAttnRows, g1 = std::min(a.T, g0 + kAttnRows);
    for (int64_t t = g0; t < g1;) {
      int64_t te = t + 1;  // rows t .. te-1: one sequence
      while (te < g1 && a.block_tables[te] == a.block_tables[t]) ++te;
      // rows: AttendRows's rows, the run's (R = te - t, stride HD) or, for a run of one row,
      // heads h .. h + R - 1 of it (stride D).
      const bool heads = te - t == 1 && hs > 1 && !narrow;
      if (heads && (h % group) % hs != 0) {  // the sub-group's first head runs this one
        t = te;
        continue;
      }
      const int64_t R = heads ? std::min(hs, group - h % group) : te - t;
      const int64_t ld = heads ? D : HD;
      int64_t n[kAttnRows], nmax = 0;
      for (int64_t r = 0; r < R; ++r) n[r] = a.keys(heads ? t : t + r), nmax = std::max(nmax, n[r]);
      if (built != a.block_tables[t] || built_n < nmax) {  // where each key and value starts
        kr.resize(size_t(nmax)), vr.resize(size_t(nmax));
        if (fp8) ks.resize(size_t(nmax)), vs.resize(size_t(nmax));
        for (int64_t j0 = 0; j0 < nmax; j0 += a.block_size)  // positions of a block: contiguous
          for (int kv = 0; kv < 2; ++kv) {
            const void* base = kv ? a.v : a.k;
            const char* p0 = static_cast<const char*>(a.kv_row(base, t, j0));
            const float* s0 = fp8 ? a.fp8_scales(base, t, j0) : nullptr;
            for (int64_t j = j0; j < std::min(nmax, j0 + a.block_size); ++j) {
              (kv ? vr : kr)[size_t(j)] = p0 + (j - j0) * step;
              if (fp8) (kv ? vs : ks)[size_t(j)] = s0 + (j - j0) * a.Hkv;
            }
          }
        built = a.block_tables[t], built_n = nmax;
      }
      if (s.size() < size_t(kAttnRows * nmax)) s.resize(size_t(kAttnRows * nmax));
      const int64_t off = hk * D;
      // make_row(p): the row type over the cached values at p, head hk.
      const void* const* kp = kr.data();
      const void* const* vp = vr.data();
      const float* const* ksp = ks.data();
      const float* const* vsp = vs.data();
      auto run = [&](auto make_row, auto kscale, auto vscale) {
        auto krow = [&](int64_t j) { return make_row(kp[j]); };
        auto vrow = [&](int64_t j) { return make_row(vp[j]); };
        const float* q = a.q + t * HD + h * D;
        float* o = static_cast<float*>(a.out) + t * HD + h * D;
        if (narrow) {
          for (int64_t r = 0; r < te - t; ++r) {
            if (D == 8)
              AttendRowNarrow<8>(q + r * HD, n[r], a.scale, krow, vrow, kscale, vscale, s.data(),
                                 o + r * HD);
            else
              AttendRowNarrow<4>(q + r * HD, n[r], a.scale, krow, vrow, kscale, vscale, s.data(),
                                 o + r * HD);
          }
          return;
        }
        WithCount<kAttnRows>(R, [&](auto nr) {
          AttendRows<decltype(nr)::value>(q, ld, D, n, a.scale, krow, vrow, kscale, vscale,
                                          s.data(), nmax, o, ld);
        });
      };
      auto one = [](int64_t) { return 1.0f; };
      if (fp8) {
        const float* lut = scaled_tables().e4m3;
        run(
            [&](const void* p) {
              return RowFp8{static_cast<const uint8_t*>(p) + off, lut, nullptr, 1};
            },
            [&](int64_t j) { return ksp[j][hk]; }, [&](int64_t j) { return vsp[j][hk]; });
      } else if (bf16) {
        run([&](const void* p) { return RowBF16{static_cast<const hwy::bfloat16_t*>(p) + off}; },
            one, one);
      } else {
        run([&](const void* p) { return RowF32{static_cast<const float*>(p) + off}; }, one, one);
      }
      t = te;
    }
  }
}

// Rows [r0, r1) of x (n wide): x += delta first when delta is given, then y = (x · inv) · w
// with inv = 1 / sqrt(ss / n + eps), ss = one vector accumulator of squares over the vector
// steps in order, its lanes summed (SumOfLanes), then the scalar tail in order. The same
// arithmetic for a row whatever the row count.
void RmsnormRows(float* x, const float* delta, const float* w, float* y, int64_t r0, int64_t r1,
                 int64_t n, float eps) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  for (int64_t r = r0; r < r1; ++r) {
    float* xr = x + r * n;
    float* yr = y + r * n;
    auto acc = hn::Zero(d);
    int64_t i = 0;
    if (delta) {
      const float* dr = delta + r * n;
      for (; i + L <= n; i += L) {
        const auto v = hn::Add(hn::LoadU(d, xr + i), hn::LoadU(d, dr + i));
        hn::StoreU(v, d, xr + i);
        acc = hn::MulAdd(v, v, acc);
      }
      for (int64_t j = i; j < n; ++j) xr[j] += dr[j];
    } else {
      for (; i + L <= n; i += L) {
        const auto v = hn::LoadU(d, xr + i);
        acc = hn::MulAdd(v, v, acc);
      }
    }
    float tail = 0.0f;
    for (int64_t j = i; j < n; ++j) tail += xr[j] * xr[j];
    const float ss = hn::GetLane(hn::SumOfLanes(d, acc)) + tail;
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    const auto vinv = hn::Set(d, inv);
    for (i = 0; i + L <= n; i += L)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), vinv), hn::LoadU(d, w + i)), d, yr + i);
    for (; i < n; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

// out = g / (1 + exp(-g)) · u, lane-wise with Highway's exp (exp's argument capped at 100,
// where the quotient is 0 either way).
void SwigluRange(const float* g, const float* u, float* out, int64_t n) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f), cap = hn::Set(d, 100.0f);
  auto f = [&](hn::Vec<DF> gv, hn::Vec<DF> uv) {
    const auto e = hn::Exp(d, hn::Min(hn::Neg(gv), cap));
    return hn::Mul(hn::Div(gv, hn::Add(one, e)), uv);
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(f(hn::LoadU(d, g + i), hn::LoadU(d, u + i)), d, out + i);
  if (i < n) {  // the last lanes through the same vector function
    HWY_ALIGN float gp[64] = {}, up[64] = {}, op[64];
    for (int64_t j = i; j < n; ++j) gp[j - i] = g[j], up[j - i] = u[j];
    hn::Store(f(hn::Load(d, gp), hn::Load(d, up)), d, op);
    for (int64_t j = i; j < n; ++j) out[j] = op[j - i];
  }
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace basalt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace basalt::cpu {
HWY_EXPORT(MatmulRows);
HWY_EXPORT(MatmulQ8Rows);
HWY_EXPORT(QuantizeActsRows);
HWY_EXPORT(AttentionTasks);
HWY_EXPORT(RmsnormRows);
HWY_EXPORT(SwigluRange);
HWY_EXPORT(TargetName);

void matmul_rows(const float* x, int64_t T, const WeightRef& w, int64_t n0, int64_t n1, float* y,
                 int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(MatmulRows)(x, T, w, n0, n1, y, ldy);
}
void matmul_q8_rows(const ref::Q8Acts& a, int64_t t0, int64_t t1, const WeightRef& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(MatmulQ8Rows)(a, t0, t1, w, n0, n1, y, ldy);
}
void quantize_acts_rows(const float* x, int64_t t0, int64_t t1, ref::Q8Acts& a) {
  HWY_DYNAMIC_DISPATCH(QuantizeActsRows)(x, t0, t1, a);
}
void attention_tasks(const AttentionArgs& a, int64_t i0, int64_t i1) {
  HWY_DYNAMIC_DISPATCH(AttentionTasks)(a, i0, i1);
}
void rmsnorm_rows(float* x, const float* delta, const float* w, float* y, int64_t r0, int64_t r1,
                  int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsnormRows)(x, delta, w, y, r0, r1, n, eps);
}
void swiglu_range(const float* g, const float* u, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluRange)(g, u, out, n);
}
const char* simd_target_name() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}
}  // namespace basalt::cpu
#endif
