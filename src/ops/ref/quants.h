// Reference dequantisation of the GGUF block types, written from ggml's published block
// layouts (ggml-common.h). Each function decodes `n_blocks` consecutive blocks into
// n_blocks * block_elems floats. Arithmetic order is part of the definition: the SIMD kernels
// (backends/cpu/kernels_quant_hwy.cpp) reproduce these values bit for bit.
//
// Layouts (little-endian, no padding; "f16" is IEEE half):
//   Q4_0  (32 elems, 18 bytes):  f16 d | u8 qs[16]
//         x[j] = d * (q[j] - 8), q[j] = qs[j] & 15 (j < 16), qs[j - 16] >> 4 (j >= 16)
//   Q4_K  (256 elems, 144 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
//         8 sub-blocks s of 32 elements, each with a 6-bit scale sc[s] and 6-bit min m[s]
//         (packing in k_scale_min below). Sub-blocks 2i and 2i+1 share qs[32i .. 32i+31]:
//         low nibbles for 2i, high nibbles for 2i+1.
//         x = (d * sc) * q - dmin * m
//   Q5_K  (256 elems, 176 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//         as Q4_K, plus bit s of qh[l] as bit 4 of element l of sub-block s; q in 0..31.
//   Q6_K  (256 elems, 210 bytes): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//         two halves h of 128 elements; within a half, element 32k + l (k < 4, l < 32) has
//         low 4 bits from ql[64h + 32(k & 1) + l] (low nibble for k < 2, high for k >= 2),
//         high 2 bits (qh[32h + l] >> 2k) & 3; q in -32..31; scale scales[e / 16].
//         x = (d * scales[e / 16]) * q
// Exactness: every product above is exact in f32 except the last multiply of Q6_K (19-bit
// d·sc times a 6-bit q) and the final subtraction of the K types; each rounds once.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace basalt::ref {

// The IEEE half at p (unaligned, little-endian) as f32: the blocks' d and dmin fields.
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K / Q5_K block.
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {  // bytes 0..3 hold scales 0..3, bytes 4..7 mins 0..3 (low 6 bits)
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {  // low 4 bits in bytes 8..11, high 2 bits in the top bits of bytes 0..7
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The integer code of element e (0 .. block elems − 1) of one block, from the layouts above:
// Q8_0 q (−128 .. 127); Q4_0 q − 8 (−8 .. 7); Q4_K q (0 .. 15); Q5_K q (0 .. 31); Q6_K the
// stored 6 bits (0 .. 63, so the signed q is code − 32). The dequantisers below and
// ref::q8_dot (ops/ref/qdot.h) read the blocks through it.
int block_code(DType t, const uint8_t* block, int e);
// The inverse for the K types (Q4_K, Q5_K, Q6_K): ORs the bits of `code` (as block_code
// returns it) into a block whose code bytes start zeroed. The encoders write through it.
void put_block_code(DType t, uint8_t* block, int e, int code);

void dequant_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out);
void dequant_q4_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void dequant_q5_k(const uint8_t* blocks, int64_t n_blocks, float* out);
void dequant_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out);
// Q8_0 too, for one entry point over all GGUF block types.
void dequant_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out);

// Dispatch by dtype; false if t is not a block-quantized type.
bool dequant_blocks(DType t, const uint8_t* blocks, int64_t n_blocks, float* out);

}  // namespace basalt::ref
