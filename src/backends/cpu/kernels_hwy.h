// SIMD kernels of the CPU backend (Highway, runtime dispatch over SSE4/AVX2/AVX-512/NEON).
// Every dot product uses one fixed schedule per (K, dtype, target): F32, F16, BF16, FP8 and
// NVFP4 weights one vector accumulator over the vector steps in order, a scalar tail, then a
// fixed combine; GGUF block weights with f32 activations two accumulators over alternating
// steps (matmul_quant-inl.h), with 8-bit activations ref::q8_dot. Tiling over rows of x or W
// never changes a schedule, so results do not depend on T or on the thread count.
#pragma once
#include <cstdint>

#include "ops/backend.h"
#include "ops/ref/qdot.h"

namespace basalt::cpu {

// y[t, n] for t in [0, T), n in [n0, n1): y row stride ldy.
void matmul_rows(const float* x, int64_t T, const WeightRef& w, int64_t n0, int64_t n1, float* y,
                 int64_t ldy);
// The same over GGUF block weights with the rows of x already quantised (ops/ref/qdot.h):
// y[t, n] = ref::q8_dot(row n, activation row t) for t in [t0, t1), bit for bit (y row t at
// y + t * ldy).
void matmul_q8_rows(const ref::Q8Acts& a, int64_t t0, int64_t t1, const WeightRef& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy);
// ref::quantize_acts_rows, the same bits, in vectors.
void quantize_acts_rows(const float* x, int64_t t0, int64_t t1, ref::Q8Acts& a);
// Attention (Backend::attention) for the tasks [i0, i1), task = g * H + h for the rows
// g · kAttnRowsPerTask .. + kAttnRowsPerTask - 1 of the pass and head h (rows of one sequence
// share each key and value load): scores with the matmul schedule, softmax in key order, values
// summed in key order, per row the same whichever rows share its task.
inline constexpr int kAttnRowsPerTask = 8;
void attention_tasks(const AttentionArgs& a, int64_t i0, int64_t i1);
// Rows [r0, r1) of x (n wide): x += delta first (when delta is not null), then
// y = x / sqrt(mean(x²) + eps) · w, with one vector sum of squares per row (fixed per n).
void rmsnorm_rows(float* x, const float* delta, const float* w, float* y, int64_t r0, int64_t r1,
                  int64_t n, float eps);
// out[i] = g[i] / (1 + exp(-g[i])) · u[i], lane-wise (Highway's exp).
void swiglu_range(const float* g, const float* u, float* out, int64_t n);
// Name of the SIMD target chosen at run time (e.g. "AVX3").
const char* simd_target_name();

}  // namespace basalt::cpu
