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
// R rows of x against C rows of W. Per (r, c) pair the schedule is fixed: acc0 takes vector
// steps 0, 2, 4…, acc1 steps 1, 3, 5…, a final odd vector step goes to acc0, then the scalar
// tail in order, then (sum(acc0 + acc1)) + tail.
template <int R, int C, class Row>
HWY_INLINE void Tile(const float* x, int64_t ldx, const Row* rows, int64_t K, float* y,
                     int64_t ldy) {
  const DF d;
  const int64_t L = int64_t(hn::Lanes(d));
  hn::Vec<DF> a0[R][C], a1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a0[r][c] = a1[r][c] = hn::Zero(d);
  int64_t k = 0;
  for (; k + 2 * L <= K; k += 2 * L) {
    hn::Vec<DF> w0[C], w1[C];
    for (int c = 0; c < C; ++c) {
      w0[c] = rows[c].load(d, k);
      w1[c] = rows[c].load(d, k + L);
    }
    for (int r = 0; r < R; ++r) {
      const auto x0 = hn::LoadU(d, x + r * ldx + k);
      const auto x1 = hn::LoadU(d, x + r * ldx + k + L);
      for (int c = 0; c < C; ++c) {
        a0[r][c] = hn::MulAdd(x0, w0[c], a0[r][c]);
        a1[r][c] = hn::MulAdd(x1, w1[c], a1[r][c]);
      }
    }
  }
  if (k + L <= K) {
    for (int c = 0; c < C; ++c) {
      const auto w0 = rows[c].load(d, k);
      for (int r = 0; r < R; ++r)
        a0[r][c] = hn::MulAdd(hn::LoadU(d, x + r * ldx + k), w0, a0[r][c]);
    }
    k += L;
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float tail = 0.0f;
      for (int64_t j = k; j < K; ++j) tail += x[r * ldx + j] * rows[c].at(j);
      y[r * ldy + c] = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0[r][c], a1[r][c]))) + tail;
    }
  }
}

// Tiles of kR rows of x × kC weight rows keep 2·kR·kC accumulators, kC pairs of weight vectors
// and a pair of x vectors in registers: 2 × 2 (prefill) and 1 × 3 (decode) fit the 16 vector
// registers of AVX2 (4 × 4 spilled and ran at a third of the FMA rate). The tile shape never
// changes a dot product's schedule.
template <int kR, int kC, class Row, class MakeRow>
HWY_INLINE void MatmulTiles(const float* x, int64_t T, int64_t K, int64_t n0, int64_t n1,
                            float* y, int64_t ldy, MakeRow make_row) {
  int64_t n = n0;
  for (; n + kC <= n1; n += kC) {
    Row rows[kC];
    for (int c = 0; c < kC; ++c) rows[c] = make_row(n + c);
    int64_t t = 0;
    for (; t + kR <= T; t += kR) Tile<kR, kC>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
    for (; t < T; ++t) Tile<1, kC>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
  }
  for (; n < n1; ++n) {
    const Row rows[1] = {make_row(n)};
    int64_t t = 0;
    for (; t + kR <= T; t += kR) Tile<kR, 1>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
    for (; t < T; ++t) Tile<1, 1>(x + t * K, K, rows, K, y + t * ldy + n, ldy);
  }
}

// Tiles of R rows of x × C weight rows keep 2·R·C accumulators, C pairs of weight vectors and a
// pair of x vectors in registers. Measured on a 2-core AVX2 EPYC (f16 qwen3-0.6b shapes, sums of
// medians): 4 × 1 in prefill (each converted weight vector feeds 4 FMAs; 4 × 4 spilled its 32
// accumulators: 1.35x slower; 2 × 2, 6 × 1, 3 × 2 within 5-30 % behind) and 1 × 1 in decode,
// where the weights stream once (1 × 3: 1.17x slower, 1 × 4: 1.6x). The tile shape never
// changes a dot product's schedule.
template <class Row, class MakeRow>
HWY_INLINE void MatmulT(const float* x, int64_t T, int64_t K, int64_t n0, int64_t n1, float* y,
                        int64_t ldy, MakeRow make_row) {
  if (T >= 4)
    MatmulTiles<4, 1, Row>(x, T, K, n0, n1, y, ldy, make_row);
  else
    MatmulTiles<1, 1, Row>(x, T, K, n0, n1, y, ldy, make_row);
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
    MatmulT<RowNvfp4>(x, T, K, n0, n1, y, ldy, [&](int64_t n) {
      return RowNvfp4{q + n * (K / 2), S + n * (K / 16), &tb};
    });
  } else {
    const bool blocks = w.scales && w.scale_block > 0;
    const int64_t B = blocks ? w.scale_block : 1, kb = blocks ? (K + B - 1) / B : 0;
    const auto* s = static_cast<const float*>(w.scales);
    MatmulT<RowFp8>(x, T, K, n0, n1, y, ldy, [&](int64_t n) {
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

float DotF32(const float* a, const float* b, int64_t n) {
  float y;
  const RowF32 rows[1] = {RowF32{b}};
  Tile<1, 1>(a, n, rows, n, &y, 1);
  return y;
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
