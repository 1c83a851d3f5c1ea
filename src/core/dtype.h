// Element types basalt knows, their sizes and conversions to f32.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace basalt {

enum class DType : uint8_t {
  F64,
  F32,
  F16,
  BF16,
  F8_E4M3,
  F8_E5M2,
  I8,
  I16,
  I32,
  I64,
  U8,
  U16,
  U32,
  U64,
  BOOL,
  Q8_0,  // GGUF block: f16 scale d, then 32 int8 q; x = d * q
  // GGUF (ggml) block-quantized types; layouts and formulas in ops/ref/quants.h.
  Q4_0,  // 32 elements in 18 bytes: f16 d, 16 bytes of nibbles; x = d * (q - 8)
  Q4_K,  // 256 elements in 144 bytes: 8 sub-blocks of 32, 6-bit scales and mins
  Q5_K,  // 256 elements in 176 bytes: Q4_K plus a fifth bit per element
  Q6_K,  // 256 elements in 210 bytes: 16 sub-blocks of 16, int8 scales
  // ModelOpt NVFP4 weight data: two E2M1 codes a byte, low nibble first (16 elements in 8
  // bytes); the E4M3 scale of each 16 and the per-tensor scale live in WeightRef (ops/ref/
  // scaled.h, docs/formats.md).
  NVFP4,
};

// Elements per block (1 for plain types) and bytes per block.
int dtype_block_elems(DType t);
int dtype_block_bytes(DType t);
std::string_view dtype_name(DType t);
// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...); false if unknown.
bool dtype_from_safetensors(std::string_view s, DType* out);
// Bytes for n elements; throws basalt::Error if n is not a whole number of blocks.
size_t dtype_bytes(DType t, int64_t n);
bool dtype_is_float(DType t);

// --- scalar conversions (exact, round-to-nearest-even where narrowing) -----------------------
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  return std::bit_cast<float>(u);
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float fp8_e4m3_to_f32(uint8_t v);  // OCP E4M3FN: no inf, 0x7f/0xff NaN, max 448
float fp8_e5m2_to_f32(uint8_t v);
// f32 → OCP E4M3FN, round to nearest even, saturating at ±448 (NaN → 0x7f with the sign).
uint8_t f32_to_fp8_e4m3(float f);
// E2M1 (FP4) code, low 4 bits: bit 3 sign, bits 2..0 index the magnitudes 0, 0.5, 1, 1.5, 2, 3,
// 4, 6.
float fp4_e2m1_to_f32(uint8_t code);
// f32 → E2M1 code, round to nearest even (ties to the even code), saturating at ±6; the sign
// bit is set for x < 0 (so -0.1 → 0x8, "-0"); NaN → 0.
uint8_t f32_to_fp4_e2m1(float f);

// Reads element i of a plain (non-block) tensor as f32 / f64 / int64.
double dtype_read_f64(DType t, const void* data, int64_t i);

}  // namespace basalt
