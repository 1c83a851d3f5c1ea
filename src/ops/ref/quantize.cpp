#include "ops/ref/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/ref/quants.h"

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

// One Q4_K / Q5_K sub-block of 32 values as x ≈ a·L − b with a, b ≥ 0 and levels L in
// 0..nmax (15 or 31).
struct SubFit {
  float a = 0.0f, b = 0.0f;
};

// Candidate grids: the one spanning [min(x, 0), max(x)] with nmax steps, and 20 neighbours
// with nmax − 1 .. nmax + 1 steps over that span (their ends clamp). Each candidate's levels L
// get the least-squares a, c of x ≈ a·L + c with c ≤ 0 (the format's offset −dmin·m is never
// positive); the fit of least squared error wins. Sums in double, the error in closed form.
SubFit fit_sub_block(const float* x, int nmax) {
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
  SubFit best{(mx - mn) / float(nmax), -mn};
  for (int k = -10; k <= 10; ++k) {
    const float iscale = (float(nmax) + 0.1f * float(k)) / (mx - mn);
    int sL = 0, sLL = 0;
    double sLx = 0;
    for (int i = 0; i < n; ++i) {
      const int L = clamp_round((x[i] - mn) * iscale, nmax);
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

// One Q6_K group of 16 values as x ≈ a·L with levels L in −32..31 (a of either sign): the grid
// that puts the value of largest |x| on −32, and 18 neighbours (−31.1 .. −32.9 there); each
// candidate's levels get the least-squares a = Σ L·x / Σ L²; least squared error wins.
float fit_group16(const float* x) {
  constexpr int n = 16;
  float big = 0.0f;
  double sxx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(big)) big = x[i];
    sxx += double(x[i]) * x[i];
  }
  if (big == 0.0f) return 0.0f;
  double best_err = std::numeric_limits<double>::infinity();
  float best = big / -32.0f;
  for (int k = -9; k <= 9; ++k) {
    const float iscale = (-32.0f + 0.1f * float(k)) / big;
    int sLL = 0;
    double sLx = 0;
    for (int i = 0; i < n; ++i) {
      const int L = clamp_round(x[i] * iscale + 32.0f, 63) - 32;
      sLL += L * L, sLx += L * double(x[i]);
    }
    if (sLL == 0) continue;
    const double a = sLx / sLL, err = sxx - a * sLx;  // Σ (a·L − x)² at the optimum a
    if (err < best_err) best_err = err, best = float(a);
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

namespace {
// Q4_K (144 bytes) and Q5_K (176): the same scales; codes through put_block_code.
void quantize_k(DType t, const float* x, int64_t n_blocks, uint8_t* out) {
  const int nmax = t == DType::Q4_K ? 15 : 31, bytes = dtype_block_bytes(t);
  for (int64_t b = 0; b < n_blocks; ++b, x += 256, out += bytes) {
    std::memset(out, 0, size_t(bytes));
    SubFit f[8];
    float max_a = 0.0f, max_b = 0.0f;
    for (int s = 0; s < 8; ++s) {
      f[s] = fit_sub_block(x + 32 * s, nmax);
      max_a = std::max(max_a, f[s].a), max_b = std::max(max_b, f[s].b);
    }
    store_f16(out, max_a / 63.0f);
    store_f16(out + 2, max_b / 63.0f);
    const float d = load_f16(out), dmin = load_f16(out + 2);
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
    for (int s = 0; s < 8; ++s) {
      const float ds = d * float(sc[s]), dm = dmin * float(m[s]);
      for (int l = 0; l < 32; ++l) {
        const int q = ds > 0.0f ? clamp_round((x[32 * s + l] + dm) / ds, nmax) : 0;
        put_block_code(t, out, 32 * s + l, q);
      }
    }
  }
}
}  // namespace

void quantize_q4_k(const float* x, int64_t n_blocks, uint8_t* out) {
  quantize_k(DType::Q4_K, x, n_blocks, out);
}

void quantize_q5_k(const float* x, int64_t n_blocks, uint8_t* out) {
  quantize_k(DType::Q5_K, x, n_blocks, out);
}

void quantize_q6_k(const float* x, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 256, out += 210) {
    std::memset(out, 0, 210);
    float a[16], max_a = 0.0f;
    for (int g = 0; g < 16; ++g) {
      a[g] = fit_group16(x + 16 * g);
      max_a = std::max(max_a, std::fabs(a[g]));
    }
    store_f16(out + 208, max_a / 127.0f);
    const float d = load_f16(out + 208);
    auto* scales = reinterpret_cast<int8_t*>(out + 192);
    for (int g = 0; g < 16; ++g) {
      const int sc = d > 0.0f ? std::clamp(int(std::lround(a[g] / d)), -127, 127) : 0;
      scales[g] = int8_t(sc);
      const float ds = d * float(sc);
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0.0f ? clamp_round(x[16 * g + l] / ds + 32.0f, 63) : 32;
        put_block_code(DType::Q6_K, out, 16 * g + l, q);
      }
    }
  }
}

bool quantize_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
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
    case DType::Q5_K:
      quantize_q5_k(x, n / 256, out);
      return;
    case DType::Q6_K:
      quantize_q6_k(x, n / 256, out);
      return;
    default:
      fail("[quantize] cannot encode {} (supported: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)",
           dtype_name(t));
  }
}

}  // namespace basalt::ref
