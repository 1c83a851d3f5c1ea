// Compiled once per SIMD target by Highway's foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_hwy.h"
#include "backends/cpu/matmul_q8-inl.h"
#include "backends/cpu/matmul_quant-inl.h"
#include "core/dtype.h"
#include "ops/ref/scaled.h"

HWY_BEFORE_NAMESPACE();
namespace basalt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Loads lanes k .. k+L-1 of one weight row as f32.
struct RowF32 {
  const float* p;
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const { return hn::LoadU(d, p + k); }
  HWY_INLINE float at(int64_t k) const { return p[k]; }
};
struct RowBF16 {
  const hwy::bfloat16_t* p;
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const {
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
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
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, p + k));
  }
  HWY_INLINE float at(int64_t k) const {
    uint16_t u;
    std::memcpy(&u, p + k, 2);
    return f16_to_f32(u);
  }
};
// R rows of x against C rows of W, one vector accumulator per (r, c) pair. Per pair the
// schedule is fixed: the vector steps k = 0, L, 2L… in order into that accumulator (one fma per
// lane and step), then the scalar tail in order, then sum(acc) + tail. The weight vector a step
// loads is used by every row of the tile (and x's by every column), so a 2 × 6 tile makes 12
// fmas from 2 + 6 loads.
template <int R, int C, class Row>
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
    for (int c = 0; c < C; ++c) {
      const auto wv = rows[c].load(d, k);
      for (int r = 0; r < R; ++r) a[r][c] = hn::MulAdd(xv[r], wv, a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float tail = 0.0f;
      for (int64_t j = k; j < K; ++j) tail += x[r * ldx + j] * rows[c].at(j);
      y[r * ldy + c] = hn::GetLane(hn::SumOfLanes(d, a[r][c])) + tail;
    }
  }
}

// Tiles of 2 rows of x × 6 weight rows (12 accumulators, 2 x vectors and one weight vector: 15
// of AVX2's 16 registers); a pass walks the columns in groups of 6 and, per group, every pair of
// rows of an x block of at most 256 KiB, so the group's weights stay in L1 while x streams from
// L2. Measured on a 2-core AVX2 EPYC (f16 weights, f32 x, 3072 × 1024 and 1024 × 3072, one
// thread): 2 × 6 at 79-90 GFLOP/s (80-90 % of the FMA peak); 4 × 3 at 50-56 and 3 × 4 at 47
// (x streamed from L2 twice as often per fma); the previous two-accumulator 4 × 1 tiles at 43.
// Decode (T = 1) runs 1 × 6 tiles: six independent fma chains over six weight streams. The
// tile shape never changes a dot product's schedule.
// `Panel`: weights whose decoding costs more than a load (FP8 and NVFP4 through tables) are
// decoded once per group of 6 rows into f32 (the same values load() returns) when the pass
// has more than 2 rows, then read as F32 rows.
template <class Row, bool Panel = false, class MakeRow>
HWY_INLINE void MatmulT(const float* x, int64_t T, int64_t K, int64_t n0, int64_t n1, float* y,
                        int64_t ldy, MakeRow make_row) {
  constexpr int kC = 6;
  const int64_t tb = std::max<int64_t>(2, ((int64_t(256) << 10) / std::max<int64_t>(K * 4, 1)) & ~1);
  auto group = [&](const auto* rows, auto cols, int64_t n) {
    constexpr int C = decltype(cols)::value;
    for (int64_t t0 = 0; t0 < T; t0 += tb) {
      const int64_t t1 = std::min(T, t0 + tb);
      int64_t t = t0;
      for (; t + 2 <= t1; t += 2) Tile<2, C>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
      if (t < t1) Tile<1, C>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
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
        group(f, std::integral_constant<int, kC>(), n);
        continue;
      }
    }
    group(rows, std::integral_constant<int, kC>(), n);
  }
  for (; n < n1; ++n) {
    const Row rows[1] = {make_row(n)};
    group(rows, std::integral_constant<int, 1>(), n);
  }
}

// Scaled formats (ops/ref/scaled.h): y[t, n] = factor(n) · Σ_k inner(n, k) · x[t, k]. The inner
// values are decoded in registers (table gathers: E4M3 codes through a 256-entry table, E2M1
// through a 16-entry one times the group's E4M3 scale) with the products ref::scaled_inner_row
// forms, fed to Tile exactly as F32 weights, and each column is then multiplied by its factor:
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
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const hn::Rebind<uint8_t, DF> d8;
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
  HWY_INLINE hn::Vec<DF> load(DF d, int64_t k) const {
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

// Two accumulators (vector steps 0, 2, 4… and 1, 3, 5…), a final odd step into the first, the
// scalar tail in order, then sum(acc0 + acc1) + tail: a lone dot product (attention scores)
// runs two fma chains instead of one.
float DotF32(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t k = 0;
  for (; k + 2 * L <= n; k += 2 * L) {
    a0 = hn::MulAdd(hn::LoadU(d, a + k), hn::LoadU(d, b + k), a0);
    a1 = hn::MulAdd(hn::LoadU(d, a + k + L), hn::LoadU(d, b + k + L), a1);
  }
  if (k + L <= n) {
    a0 = hn::MulAdd(hn::LoadU(d, a + k), hn::LoadU(d, b + k), a0);
    k += L;
  }
  float tail = 0.0f;
  for (; k < n; ++k) tail += a[k] * b[k];
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1))) + tail;
}

void AxpyF32(float* y, float s, const float* x, int64_t n) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, s);
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::MulAdd(vs, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] = s * x[i] + y[i];
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
HWY_EXPORT(DotF32);
HWY_EXPORT(AxpyF32);
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
float dot_f32(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n);
}
void axpy_f32(float* y, float s, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF32)(y, s, x, n);
}
const char* simd_target_name() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}
}  // namespace basalt::cpu
#endif
