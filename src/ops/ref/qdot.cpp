#include "ops/ref/qdot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/ref/quants.h"

namespace basalt::ref {

bool q8_acts_supported(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

int q8_group(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 ? 32 : 256;
}

void q8_acts_resize(Q8Acts& a, int64_t T, int64_t K, int64_t G) {
  if (G <= 0 || K % G != 0 || G % 32 != 0)
    fail("[ops] q8 activations: K = {} is not a multiple of the group {}", K, G);
  a.T = T, a.K = K, a.G = G;
  a.d.resize(size_t(T * (K / G)));
  a.q.resize(size_t(T * K));
  a.s16.resize(size_t(T * (K / 16)));
}

void quantize_acts_group(const float* x, int64_t G, float* d, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < G; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite || amax == 0.0f) {
    *d = finite ? 0.0f : NAN;
    std::fill(q, q + G, int8_t(0));
    return;
  }
  *d = amax / 127.0f;
  const float id = 127.0f / amax;
  for (int64_t i = 0; i < G; ++i)
    q[i] = int8_t(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
}

void acts_sums16(Q8Acts& a, int64_t t) {
  const int8_t* q = a.q.data() + t * a.K;
  int16_t* s = a.s16.data() + t * (a.K / 16);
  for (int64_t i = 0; i < a.K / 16; ++i) {
    int sum = 0;
    for (int k = 0; k < 16; ++k) sum += q[16 * i + k];
    s[i] = int16_t(sum);
  }
}

void quantize_acts_rows(const float* x, int64_t t0, int64_t t1, Q8Acts& a) {
  const int64_t K = a.K, G = a.G;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t g = 0; g < K / G; ++g)
      quantize_acts_group(x + t * K + g * G, G, a.d.data() + t * (K / G) + g, a.q.data() + t * K + g * G);
    acts_sums16(a, t);
  }
}

float q8_dot(DType t, const uint8_t* wrow, const Q8Acts& a, int64_t row) {
  const int64_t K = a.K;
  const int be = int(dtype_block_elems(t)), bb = int(dtype_block_bytes(t));
  const float* dx = a.row_d(row);
  const int8_t* qx = a.row_q(row);
  const int16_t* s16 = a.row_s16(row);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t blk = 0; blk < K / be; ++blk) {
    const uint8_t* b = wrow + blk * bb;
    const int8_t* xb = qx + blk * be;
    int sc[8] = {1, 1, 1, 1, 1, 1, 1, 1}, mn[8] = {};
    float dw = 0.0f, dmin = 0.0f;
    switch (t) {
      case DType::Q8_0:
      case DType::Q4_0:
        dw = load_f16(b);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        dw = load_f16(b), dmin = load_f16(b + 2);
        for (int j = 0; j < 8; ++j) k_scale_min(b + 4, j, &sc[j], &mn[j]);
        break;
      case DType::Q6_K:
        dw = load_f16(b + 208);
        break;
      default:
        fail("[ops] q8 matmul: weight dtype {}", dtype_name(t));
    }
    int I[8] = {};
    for (int j = 0; j < be / 32; ++j)
      for (int l = 0; l < 8; ++l) {
        int p = 0;
        for (int i = 4 * l; i < 4 * l + 4; ++i) p += block_code(t, b, 32 * j + i) * xb[32 * j + i];
        const int s = t == DType::Q6_K ? int8_t(b[192 + 2 * j + l / 4]) : sc[j];
        I[l] += s * p;
      }
    const float s = dw * dx[blk];
    for (int l = 0; l < 8; ++l) {
      acc[l] = std::fma(s, float(I[l]), acc[l]);
      const int16_t* sb = s16 + 16 * blk + 2 * l;
      if (t == DType::Q4_K || t == DType::Q5_K)
        acc[l] = std::fma(-(dmin * dx[blk]), float(mn[l] * (sb[0] + sb[1])), acc[l]);
      else if (t == DType::Q6_K)
        acc[l] = std::fma(-s, float(32 * (int8_t(b[192 + 2 * l]) * sb[0] +
                                          int8_t(b[193 + 2 * l]) * sb[1])),
                          acc[l]);
    }
  }
  return q8_tree8(acc);
}

void matmul_q8(const float* x, int64_t T, const WeightRef& w, float* y) {
  if (!q8_acts_supported(w.dtype)) fail("[ops] q8 matmul: weight dtype {}", dtype_name(w.dtype));
  Q8Acts a;
  q8_acts_resize(a, T, w.cols, q8_group(w.dtype));
  quantize_acts_rows(x, 0, T, a);
  const auto* p = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = int64_t(dtype_bytes(w.dtype, w.cols));
  for (int64_t n = 0; n < w.rows; ++n)
    for (int64_t t = 0; t < T; ++t) y[t * w.rows + n] = q8_dot(w.dtype, p + n * row_bytes, a, t);
}

}  // namespace basalt::ref
