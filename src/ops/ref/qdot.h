// Matmul over GGUF block-quantised weights with 8-bit activations, as llama.cpp computes it:
// each row of x is quantised to int8 in groups, every product of a weight code and an
// activation code is an exact integer, and floats enter only once per block. This is the
// definition the CPU kernels (backends/cpu/matmul_q8-inl.h) reproduce bit for bit; the f32
// path (ref::matmul: dequantised weights times f32 activations) stays available as the
// precise mode (docs/quants.md, "activations").
//
// Activations. One row of K values is cut into groups of G (32 for Q8_0 / Q4_0 weights, 256
// for the K types). Per group: amax = max |x|; d = amax / 127; q = nearbyint(x · (127 / amax))
// (ties to even), clamped to [-127, 127]; an all-zero group has d = 0 and q = 0, a group with a
// non-finite value has d = NaN (so the outputs it touches are NaN, as in the f32 path).
// s16[i] = Σ q over elements 16i .. 16i+15 (for the K types' min and offset terms).
//
// Dot product of an activation row with one weight row. Every block b of the weight row (32 or
// 256 elements) is split into sub-blocks of 32, and each sub-block into 8 lanes of 4 elements
// (lane l: elements 4l .. 4l+3). P(j, l) = Σ over lane l of sub-block j of qw · qx is an
// exact integer (qw the weight's integer code, below), and so are the per-lane block sums
// I(l) = Σ_j sc(j, l) · P(j, l) with the sub-block's integer scale sc (1 for Q8_0 / Q4_0).
// Then, per block, with s = dw · dx (one f32 product) and fma rounding once, for l = 0 .. 7:
//   acc[l] = fma(s, float(I(l)), acc[l])
//   acc[l] = fma(−s_m, float(M(l)), acc[l])          (K types only; M(l) an exact integer)
// and y = ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7)).
// Per type (codes as in ops/ref/quants.h; S(j) = s16[2j] + s16[2j+1], the sum of sub-block j):
//   Q8_0  qw = q (−128 .. 127), dw = d, blocks of 32 (one sub-block)
//   Q4_0  qw = q − 8 (−8 .. 7), dw = d
//   Q4_K  qw = q (0 .. 15), sc = 6-bit scale of sub-block j, dw = d;
//         M(l) = m(l) · S(l) (lane l carries sub-block l's min), s_m = dmin · dx
//   Q5_K  as Q4_K with qw = q (0 .. 31)
//   Q6_K  qw = q + 32 (0 .. 63), sc = scales[2j] for lanes 0..3 and scales[2j+1] for lanes
//         4..7, dw = d; M(l) = 32 · (scales[2l] · s16[2l] + scales[2l+1] · s16[2l+1]) (takes
//         the + 32 back), s_m = s
// The integers fit: |I(l)| < 2^31, and the sum of two adjacent products stays inside 16 bits
// for every type (at most 2 · 128 · 127, which the kernels' 16-bit pair sums need). Rows are
// quantised alone, so a row's result does not depend on T.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace basalt::ref {

// Whether matmuls over `t` weights can run with 8-bit activations (the GGUF block types).
bool q8_acts_supported(DType t);
// Activation group size for weights of type t: 32 (Q8_0, Q4_0) or 256 (K types).
int q8_group(DType t);

// T rows of K activations quantised for weights of one type (group G).
struct Q8Acts {
  int64_t T = 0, K = 0, G = 0;
  std::vector<float> d;      // [T, K / G]
  std::vector<int8_t> q;     // [T, K]
  std::vector<int16_t> s16;  // [T, K / 16]
  const float* row_d(int64_t t) const { return d.data() + t * (K / G); }
  const int8_t* row_q(int64_t t) const { return q.data() + t * K; }
  const int16_t* row_s16(int64_t t) const { return s16.data() + t * (K / 16); }
};

// Rows [t0, t1) of x [T, K] into `a` (sized by q8_acts_resize first).
void q8_acts_resize(Q8Acts& a, int64_t T, int64_t K, int64_t G);
void quantize_acts_rows(const float* x, int64_t t0, int64_t t1, Q8Acts& a);
// One group of G values: its scale *d and codes q[G] (the rule above).
void quantize_acts_group(const float* x, int64_t G, float* d, int8_t* q);
// s16 of row t from its codes.
void acts_sums16(Q8Acts& a, int64_t t);

// The fixed 8-lane tree that ends every dot product above.
inline float q8_tree8(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// One dot product as defined above: weight row `wrow` (K / block_elems blocks) with
// activation row t of `a`.
float q8_dot(DType t, const uint8_t* wrow, const Q8Acts& a, int64_t row);

// y[t, n] = q8_dot(W row n, activation row t) for all t < T, n < N (y row stride N).
void matmul_q8(const float* x, int64_t T, const WeightRef& w, float* y);

}  // namespace basalt::ref
