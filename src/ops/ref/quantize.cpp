#include "ops/ref/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace basalt::ref {

namespace {

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// round(v) clamped to [0, hi], ties away from zero like std::round, without its libm call
// (the Q4_K search rounds 700 values per sub-block).
int clamp_round(float v, int hi) {
  v = std::clamp(v, 0.0f, float(hi));
  const int r = int(v);  // v ≥ 0: truncation is floor, and v − r is exact
  return r + (v - float(r) >= 0.5f ? 1 : 0);
}

// One Q4_K sub-block of 32 values as x ≈ a·L − b with a, b ≥ 0 and levels L in 0..15.
struct SubFit {
  float a = 0.0f, b = 0.0f;
};

// Candidate grids: the one spanning [min(x, 0), max(x)] with 15 steps, and 20 neighbours
// with 14..16 steps over that span (their ends clamp). Each candidate's levels L get the
// least-squares a, c of x ≈ a·L + c with c ≤ 0 (the format's offset −dmin·m is never
// positive); the fit of least squared error wins. Sums in double, the error in closed form.
SubFit fit_sub_block(const float* x) {
  constexpr int n = 32;
  float mn = x[0], mx = x[0];
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
    sx += x[i], sxx += double(x[i]) * x[i];
  }
  mn = std::min(mn, 0.0f);
  if (!(mx > mn)) return {0.0f, -mn};  // constant ≤ 0 (or all zero)
  double best_err = std::numeric_limits<double>::infinity();
  SubFit best{(mx - mn) / 15.0f, -mn};
  for (int k = -10; k <= 10; ++k) {
    const float iscale = (15.0f + 0.1f * float(k)) / (mx - mn);
    int sL = 0, sLL = 0;
    double sLx = 0;
    for (int i = 0; i < n; ++i) {
      const int L = clamp_round((x[i] - mn) * iscale, 15);
      sL += L, sLL += L * L, sLx += L * double(x[i]);
    }
    double a = 0, c = 0;
    const double det = double(n) * sLL - double(sL) * sL;
    if (det > 0) {
      a = (n * sLx - sL * sx) / det;
      c = (sx - a * sL) / n;
    } else if (sLL > 0) {  // every level equal and non-zero: a scale alone
      a = sLx / sLL;
    } else {  // every level 0: the offset alone
      c = sx / n;
    }
    if (c > 0) c = 0, a = sLL > 0 ? sLx / sLL : 0;
    if (a < 0) a = 0, c = std::min(0.0, sx / n);
    // Σ (a·L + c − x)²
    const double err = a * a * sLL + 2 * a * c * sL + n * c * c - 2 * a * sLx - 2 * c * sx + sxx;
    if (err < best_err) best_err = err, best = {float(a), float(-c)};
  }
  return best;
}

}  // namespace

void quantize_q8_0(const float* x, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(out, d);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
  }
}

void quantize_q4_k(const float* x, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 256, out += 144) {
    SubFit f[8];
    float max_a = 0.0f, max_b = 0.0f;
    for (int s = 0; s < 8; ++s) {
      f[s] = fit_sub_block(x + 32 * s);
      max_a = std::max(max_a, f[s].a), max_b = std::max(max_b, f[s].b);
    }
    store_f16(out, max_a / 63.0f);
    store_f16(out + 2, max_b / 63.0f);
    uint16_t h;
    std::memcpy(&h, out, 2);
    const float d = f16_to_f32(h);
    std::memcpy(&h, out + 2, 2);
    const float dmin = f16_to_f32(h);
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = d > 0.0f ? clamp_round(f[s].a / d, 63) : 0;
      m[s] = dmin > 0.0f ? clamp_round(f[s].b / dmin, 63) : 0;
    }
    // 6-bit packing (inverse of k_scale_min): sub-blocks 0..3 in the low 6 bits of bytes
    // 0..3 (scales) and 4..7 (mins); 4..7 split into low nibbles in bytes 8..11 and their top
    // 2 bits in the top bits of bytes 0..7.
    uint8_t* scales = out + 4;
    for (int j = 0; j < 4; ++j) {
      scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
      scales[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
      scales[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    uint8_t* qs = out + 16;
    std::memset(qs, 0, 128);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * float(sc[s]), dm = dmin * float(m[s]);
      const int shift = 4 * (s & 1);
      for (int l = 0; l < 32; ++l) {
        const int q = ds > 0.0f ? clamp_round((x[32 * s + l] + dm) / ds, 15) : 0;
        qs[32 * (s / 2) + l] |= uint8_t(q << shift);
      }
    }
  }
}

bool quantize_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_K;
}

void quantize(DType t, const float* x, int64_t n, uint8_t* out) {
  const int64_t be = dtype_block_elems(t);
  if (n % be != 0)
    fail("[quantize] {} elements are not whole {}-element {} blocks", n, be, dtype_name(t));
  switch (t) {
    case DType::F32:
      std::memcpy(out, x, size_t(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0:
      quantize_q8_0(x, n / 32, out);
      return;
    case DType::Q4_K:
      quantize_q4_k(x, n / 256, out);
      return;
    default:
      fail("[quantize] cannot encode {} (supported: F32, F16, BF16, Q8_0, Q4_K)", dtype_name(t));
  }
}

}  // namespace basalt::ref
