#include "ops/ref/scaled.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace basalt::ref {

bool is_scaled(const WeightRef& w) {
  return w.dtype == DType::NVFP4 || w.dtype == DType::F8_E4M3;
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
}  // namespace

void scaled_inner_row(const WeightRef& w, int64_t n, float* out) {
  const auto* q = static_cast<const uint8_t*>(w.data);
  const int64_t K = w.cols;
  if (w.dtype == DType::NVFP4) {
    const auto* S = static_cast<const uint8_t*>(w.scales) + n * (K / 16);
    const uint8_t* row = q + n * (K / 2);
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t code = k % 2 ? row[k / 2] >> 4 : row[k / 2] & 0xf;
      out[k] = fp4_e2m1_to_f32(code) * fp8_e4m3_to_f32(S[k / 16]);
    }
    return;
  }
  if (w.dtype != DType::F8_E4M3)
    fail("[ops] {} is not a scaled weight format", dtype_name(w.dtype));
  const uint8_t* row = q + n * K;
  if (w.scales && w.scale_block > 0) {
    const int64_t B = w.scale_block, kb = ceil_div(K, B);
    const float* s = static_cast<const float*>(w.scales) + (n / B) * kb;
    for (int64_t k = 0; k < K; ++k) out[k] = fp8_e4m3_to_f32(row[k]) * s[k / B];
    return;
  }
  for (int64_t k = 0; k < K; ++k) out[k] = fp8_e4m3_to_f32(row[k]);
}

float scaled_factor(const WeightRef& w, int64_t n) {
  if (w.dtype == DType::F8_E4M3 && w.scales && w.scale_block == 0)
    return static_cast<const float*>(w.scales)[n] * w.scale;
  return w.scale;
}

void scaled_dequant_row(const WeightRef& w, int64_t n, float* out) {
  scaled_inner_row(w, n, out);
  const float f = scaled_factor(w, n);
  for (int64_t k = 0; k < w.cols; ++k) out[k] *= f;
}

size_t scaled_scales_bytes(const WeightRef& w) {
  if (w.dtype == DType::NVFP4) return size_t(w.rows) * size_t(w.cols / 16);
  if (w.dtype != DType::F8_E4M3 || !w.scales) return 0;
  if (w.scale_block == 0) return size_t(w.rows) * 4;
  return size_t(ceil_div(w.rows, w.scale_block) * ceil_div(w.cols, w.scale_block)) * 4;
}

float nvfp4_global_scale(float amax) {
  return amax > 0.0f ? amax / 2688.0f : 1.0f;
}

float fp8_tensor_scale(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

void quantize_nvfp4_rows(const float* x, int64_t N, int64_t K, float g, uint8_t* q, uint8_t* S) {
  if (K % 16) fail("[quantize] NVFP4 needs rows of whole groups of 16, got {} columns", K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < K / 16; ++j) {
      const float* v = x + n * K + j * 16;
      float a = 0.0f;
      for (int i = 0; i < 16; ++i) a = std::max(a, std::fabs(v[i]));
      const float sf = a / (6.0f * g);
      const uint8_t s = f32_to_fp8_e4m3(sf == 0.0f ? 1.0f : sf);
      S[n * (K / 16) + j] = s;
      const float denom = fp8_e4m3_to_f32(s) * g;
      uint8_t* out = q + n * (K / 2) + j * 8;
      for (int i = 0; i < 16; i += 2) {
        const uint8_t lo = denom == 0.0f ? 0 : f32_to_fp4_e2m1(v[i] / denom);
        const uint8_t hi = denom == 0.0f ? 0 : f32_to_fp4_e2m1(v[i + 1] / denom);
        out[i / 2] = uint8_t(lo | hi << 4);
      }
    }
}

void quantize_nvfp4(const float* x, int64_t N, int64_t K, uint8_t* q, uint8_t* S, float* g_out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(x[i]));
  *g_out = nvfp4_global_scale(amax);
  quantize_nvfp4_rows(x, N, K, *g_out, q, S);
}

void quantize_fp8_tensor(const float* x, int64_t n, uint8_t* q, float* s_out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = fp8_tensor_scale(amax);
  *s_out = s;
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_fp8_e4m3(x[i] / s);
}

void quantize_fp8_block(const float* x, int64_t N, int64_t K, int64_t B, uint8_t* q, float* s) {
  const int64_t kb = ceil_div(K, B);
  for (int64_t bn = 0; bn < ceil_div(N, B); ++bn)
    for (int64_t bk = 0; bk < kb; ++bk) {
      const int64_t n1 = std::min(N, (bn + 1) * B), k1 = std::min(K, (bk + 1) * B);
      float amax = 0.0f;
      for (int64_t n = bn * B; n < n1; ++n)
        for (int64_t k = bk * B; k < k1; ++k) amax = std::max(amax, std::fabs(x[n * K + k]));
      const float sc = fp8_tensor_scale(amax);
      s[bn * kb + bk] = sc;
      for (int64_t n = bn * B; n < n1; ++n)
        for (int64_t k = bk * B; k < k1; ++k) q[n * K + k] = f32_to_fp8_e4m3(x[n * K + k] / sc);
    }
}

float kv_fp8_encode(const float* x, int64_t D, uint8_t* codes) {
  float s;
  quantize_fp8_tensor(x, D, codes, &s);
  return s;
}

}  // namespace basalt::ref
