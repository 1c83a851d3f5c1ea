// Scalar reference implementations of every op: the oracle the fast kernels are tested
// against. Plain loops, sums in index order, fp32 like the fast paths (so the reference
// measures kernel error, not precision policy).
#pragma once
#include <memory>

#include "ops/backend.h"

namespace basalt::ref {

// The weight dtypes weight_row_f32 reads (and so every CPU matmul path supports).
bool weight_dtype_supported(DType t);
// Row n of W as f32 (F32/F16/BF16 and the GGUF block types of ops/ref/quants.h): out[K].
void weight_row_f32(const WeightRef& w, int64_t n, float* out);

void matmul(const float* x, int64_t T, const WeightRef& w, float* y);
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps);
void embedding(const WeightRef& table, const int32_t* ids, int64_t T, float* out);
void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
          const float* sin, RopeStyle style);
void attention(const AttentionArgs& a);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void add(float* y, const float* x, int64_t n);

// Hybrid / MoE ops (ops/backend.h defines each).
// Routing of one row: the top_k experts of softmax(logits) and their (renormalised) weights.
void moe_route(const float* logits, int64_t n_experts, int64_t top_k, bool norm, int32_t* ids,
               float* weights);
// The whole MoE feed-forward, row by row with scalar matmuls.
void moe(const MoeArgs& m);
// Gated DeltaNet over the pass's rows (slots, pos: [T] of PassRows).
void gdn(const GdnArgs& g, const int32_t* slots, const int64_t* pos,
         const int32_t* snaps = nullptr);
void gated_rmsnorm(const float* x, const float* z, const float* w, float* y, int64_t rows,
                   int64_t n, float eps);
void sigmoid_mul(float* y, const float* gate, int64_t n);
void gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n);

// The reference as a Backend (slow; for tests and as the definition of each op). q8_acts:
// GGUF block-quantised matmuls with 8-bit activations (ref::matmul_q8, ops/ref/qdot.h), the
// CPU backend's default; false: ref::matmul (f32 activations, dequantised weights).
std::unique_ptr<Backend> make_ref_backend(bool q8_acts = false);

}  // namespace basalt::ref
