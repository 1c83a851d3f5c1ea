// The scaled weight formats of HF quantized checkpoints (ModelOpt NVFP4 and FP8, compressed-
// tensors FP8, the Qwen3 / DeepSeek FP8 128×128 layout): how a matmul splits them into inner
// values and a per-row factor, the reference dequantisation, and the quantisers `basalt
// quantize` writes with. Formulas (docs/formats.md; tools/make_scaled_fixtures.py is an
// independent numpy implementation the tests compare against):
//
//   NVFP4    W[n,k] = e2m1(q[n,k]) · e4m3(S[n, k/16]) · g
//            inner = e2m1 · e4m3 (exact in f32 and in bf16: ≤ 6 significant bits), factor = g
//   F8_E4M3  W[n,k] = e4m3(q[n,k]) · s(n,k) · g
//            tensor / per-row scales: inner = e4m3 (exact), factor = s(n) · g (g alone if none)
//            B×B blocks:             inner = f32(e4m3 · s_block) (one rounding), factor = g
//
// Quantisers (amax-based, as ModelOpt computes them; every step an f32 operation):
//   NVFP4  g = amax / 2688 (6 · 448; amax of the whole tensor, g = 1 if amax = 0); per group of
//          16: S = e4m3(amax_group / (6 · g)) (a 0 before rounding → 1.0, as ModelOpt), then
//          q = e2m1(x / (e4m3(S) · g)) (0 when e4m3(S) = 0), two codes a byte, low nibble first.
//   FP8    per tensor: s = amax / 448 (1 if amax = 0), q = e4m3(x / s);
//          per B×B block: the same per block (s in the f32 grid, row-major over blocks).
// Rounding: e4m3 and e2m1 round to nearest even and saturate (core/dtype.h).
#pragma once
#include <cstdint>

#include "ops/backend.h"

namespace basalt::ref {

bool is_scaled(const WeightRef& w);  // NVFP4, or F8_E4M3 (with or without scales)
// Inner values of row n (before the row's factor), K of them.
void scaled_inner_row(const WeightRef& w, int64_t n, float* out);
// The factor of row n.
float scaled_factor(const WeightRef& w, int64_t n);
// Dequantised row n: f32(inner · factor) per element (one rounding when inner is exact).
void scaled_dequant_row(const WeightRef& w, int64_t n, float* out);

// Bytes of the scales array of w (0 when it has none).
size_t scaled_scales_bytes(const WeightRef& w);

// x [N, K] f32 → q [N, K/2] (packed), S [N, K/16] e4m3, *g. K % 16 == 0.
void quantize_nvfp4(const float* x, int64_t N, int64_t K, uint8_t* q, uint8_t* S, float* g);
// The pieces, for callers that spread rows over threads: g from the tensor's amax, then rows.
float nvfp4_global_scale(float amax);
void quantize_nvfp4_rows(const float* x, int64_t rows, int64_t K, float g, uint8_t* q, uint8_t* S);
float fp8_tensor_scale(float amax);  // amax / 448, or 1
// x [n] → q [n] e4m3, *s (per-tensor).
void quantize_fp8_tensor(const float* x, int64_t n, uint8_t* q, float* s);
// x [N, K] → q [N, K] e4m3, s [ceil(N/B), ceil(K/B)] f32.
void quantize_fp8_block(const float* x, int64_t N, int64_t K, int64_t B, uint8_t* q, float* s);

// One head's D values of a KV row into an F8_E4M3 cache (AttentionArgs): codes[i] =
// e4m3(x[i] / s), returns s = amax / 448 (1 if all are 0).
float kv_fp8_encode(const float* x, int64_t D, uint8_t* codes);

}  // namespace basalt::ref
