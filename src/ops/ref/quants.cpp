#include "ops/ref/quants.h"

#include <cstring>

namespace basalt::ref {

void dequant_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 34, out += 32) {
    const float d = load_f16(blocks);
    const auto* q = reinterpret_cast<const int8_t*>(blocks + 2);
    for (int j = 0; j < 32; ++j) out[j] = d * float(q[j]);
  }
}

void dequant_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 18, out += 32) {
    const float d = load_f16(blocks);
    const uint8_t* qs = blocks + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(int(qs[j] & 15) - 8);
      out[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 144, out += 256) {
    const float d = load_f16(blocks), dmin = load_f16(blocks + 2);
    const uint8_t* scales = blocks + 4;
    const uint8_t* qs = blocks + 16;
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(scales, s, &sc, &m);
      const float ds = d * float(sc), dm = dmin * float(m);
      const uint8_t* q = qs + 32 * (s / 2);
      const int shift = 4 * (s & 1);
      for (int l = 0; l < 32; ++l) out[32 * s + l] = ds * float((q[l] >> shift) & 15) - dm;
    }
  }
}

void dequant_q5_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 176, out += 256) {
    const float d = load_f16(blocks), dmin = load_f16(blocks + 2);
    const uint8_t* scales = blocks + 4;
    const uint8_t* qh = blocks + 16;
    const uint8_t* qs = blocks + 48;
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(scales, s, &sc, &m);
      const float ds = d * float(sc), dm = dmin * float(m);
      const uint8_t* q = qs + 32 * (s / 2);
      const int shift = 4 * (s & 1);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 15) | (((qh[l] >> s) & 1) << 4);
        out[32 * s + l] = ds * float(v) - dm;
      }
    }
  }
}

void dequant_q6_k(const uint8_t* blocks, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, blocks += 210, out += 256) {
    const uint8_t* ql = blocks;
    const uint8_t* qh = blocks + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(blocks + 192);
    const float d = load_f16(blocks + 208);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int lo = (ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
      const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
      const float ds = d * float(scales[e / 16]);
      out[e] = ds * float((lo | (hi << 4)) - 32);
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
