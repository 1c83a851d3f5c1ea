#include "ops/ref/quants.h"

#include <cstring>

#include "core/error.h"

namespace basalt::ref {

int block_code(DType t, const uint8_t* b, int e) {
  switch (t) {
    case DType::Q8_0:
      return int8_t(b[2 + e]);
    case DType::Q4_0:
      return int(e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4) - 8;
    case DType::Q4_K:  // sub-blocks 2i, 2i+1: low, high nibbles of qs[32i ..]
      return (b[16 + 32 * (e / 64) + e % 32] >> (4 * ((e / 32) & 1))) & 15;
    case DType::Q5_K: {  // plus bit s of qh[l] as bit 4
      const int s = e / 32, l = e % 32;
      return ((b[48 + 32 * (s / 2) + l] >> (4 * (s & 1))) & 15) | (((b[16 + l] >> s) & 1) << 4);
    }
    case DType::Q6_K: {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int lo = (b[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
      const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
      return lo | (hi << 4);
    }
    default:
      fail("[ops] {} is not a GGUF block type", dtype_name(t));
  }
}

void put_block_code(DType t, uint8_t* b, int e, int code) {
  switch (t) {
    case DType::Q4_K:
      b[16 + 32 * (e / 64) + e % 32] |= uint8_t((code & 15) << (4 * ((e / 32) & 1)));
      return;
    case DType::Q5_K: {
      const int s = e / 32, l = e % 32;
      b[48 + 32 * (s / 2) + l] |= uint8_t((code & 15) << (4 * (s & 1)));
      b[16 + l] |= uint8_t(((code >> 4) & 1) << s);
      return;
    }
    case DType::Q6_K: {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      b[64 * h + 32 * (k & 1) + l] |= uint8_t((code & 15) << (4 * (k >> 1)));
      b[128 + 32 * h + l] |= uint8_t(((code >> 4) & 3) << (2 * k));
      return;
    }
    default:
      fail("[ops] put_block_code: {} is not a K type", dtype_name(t));
  }
}

void dequant_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 34, out += 32) {
    const float d = load_f16(blocks);
    for (int j = 0; j < 32; ++j) out[j] = d * float(block_code(DType::Q8_0, blocks, j));
  }
}

void dequant_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 18, out += 32) {
    const float d = load_f16(blocks);
    for (int j = 0; j < 32; ++j) out[j] = d * float(block_code(DType::Q4_0, blocks, j));
  }
}

// Q4_K and Q5_K: x = (d * sc) * q - dmin * m per sub-block of 32.
namespace {
void dequant_k(DType t, const uint8_t* blocks, int64_t n_blocks, float* out) {
  const int block_bytes = dtype_block_bytes(t);
  for (int64_t b = 0; b < n_blocks; ++b, blocks += block_bytes, out += 256) {
    const float d = load_f16(blocks), dmin = load_f16(blocks + 2);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(blocks + 4, s, &sc, &m);
      const float ds = d * float(sc), dm = dmin * float(m);
      for (int l = 0; l < 32; ++l)
        out[32 * s + l] = ds * float(block_code(t, blocks, 32 * s + l)) - dm;
    }
  }
}
}  // namespace

void dequant_q4_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  dequant_k(DType::Q4_K, blocks, n_blocks, out);
}

void dequant_q5_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  dequant_k(DType::Q5_K, blocks, n_blocks, out);
}

void dequant_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 210, out += 256) {
    const auto* scales = reinterpret_cast<const int8_t*>(blocks + 192);
    const float d = load_f16(blocks + 208);
    for (int e = 0; e < 256; ++e) {
      const float ds = d * float(scales[e / 16]);
      out[e] = ds * float(block_code(DType::Q6_K, blocks, e) - 32);
    }
  }
}

bool dequant_blocks(DType t, const uint8_t* blocks, int64_t n_blocks, float* out) {
  switch (t) {
    case DType::Q8_0:
      dequant_q8_0(blocks, n_blocks, out);
      return true;
    case DType::Q4_0:
      dequant_q4_0(blocks, n_blocks, out);
      return true;
    case DType::Q4_K:
      dequant_q4_k(blocks, n_blocks, out);
      return true;
    case DType::Q5_K:
      dequant_q5_k(blocks, n_blocks, out);
      return true;
    case DType::Q6_K:
      dequant_q6_k(blocks, n_blocks, out);
      return true;
    default:
      return false;
  }
}

}  // namespace basalt::ref
