// Encoders for the GGUF block types basalt writes: the inverses of ops/ref/quants.h, written from
// ggml's published block layouts (docs/quants.md). Plain loops; inputs must be finite.
//
//   Q8_0  per block of 32: d = amax / 127 (f32), q = round-half-away(x · (1/d)), d stored as f16.
//         This is ggml's reference definition, so the bytes equal llama-quantize's and gguf-py's
//         for the same f32 input (tested against a gguf-py file). Error per element
//         ≤ d/2 + 127·|d − d16| ≤ 0.563·d16 (d16: the stored scale; the second term is the f16
//         rounding of d, which the quants are not re-fit to, as in ggml).
//   Q4_K  per super-block of 256 (8 sub-blocks of 32), x ≈ (d·sc)·q − dmin·m:
//         1. each sub-block: a least-squares fit x ≈ a·L − b (b ≥ 0) over the levels L (0..15)
//            of 21 candidate grids around the min/max one, keeping the fit of least squared
//            error;
//         2. d = max(a)/63, dmin = max(b)/63 stored as f16; sc = round(a/d16), m = round(b/dmin16)
//            (6 bits each);
//         3. q = clamp(round((x + dmin16·m) / (d16·sc)), 0, 15) against the stored scales.
//         Values that lie on a Q4_K grid (each sub-block using q = 0 and 15, some sc and some m
//         equal to 63) come back bit for bit; the RMS error on normal data is 0.0715 of the
//         RMS (bounds in tests/unit/test_quantize.cpp, measurements in docs/quants.md).
//         ~55 ns per element on one core (gguf_write_model spreads rows over threads).
//         Not ggml's search (its weights favour large |x|), so bytes differ from llama-quantize's.
//   Q5_K  as Q4_K with levels 0..31 (the fifth bit of each code in qh).
//   Q6_K  per super-block of 256 (16 groups of 16), x ≈ d·sc·(q − 32):
//         1. each group: x ≈ a·L with L in −32..31, the least-squares a over 19 candidate grids
//            around the one putting the largest |x| on −32 (least squared error wins);
//         2. d = max|a| / 127 stored as f16; sc = round(a / d16) (int8, ±127);
//         3. q = clamp(round(x / (d16·sc)) + 32, 0, 63) against the stored scales.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace basalt::ref {

void quantize_q8_0(const float* x, int64_t n_blocks, uint8_t* out);  // 34 bytes per block
void quantize_q4_k(const float* x, int64_t n_blocks, uint8_t* out);  // 144 bytes per block
void quantize_q5_k(const float* x, int64_t n_blocks, uint8_t* out);  // 176 bytes per block
void quantize_q6_k(const float* x, int64_t n_blocks, uint8_t* out);  // 210 bytes per block

// x[0, n) in dtype t: F32, F16, BF16 (round to nearest even), Q8_0, Q4_K, Q5_K, Q6_K; n whole
// blocks. Throws basalt::Error for other types.
void quantize(DType t, const float* x, int64_t n, uint8_t* out);
// Whether quantize() writes t.
bool quantize_supported(DType t);

}  // namespace basalt::ref
