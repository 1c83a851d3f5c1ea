#include "core/dtype.h"

#include <cmath>
#include <iterator>

#include "core/error.h"

namespace basalt {

namespace {
struct Info {
  DType t;
  const char* name;
  int block_elems;
  int block_bytes;
};
constexpr Info kInfo[] = {
    {DType::F64, "F64", 1, 8},         {DType::F32, "F32", 1, 4},
    {DType::F16, "F16", 1, 2},         {DType::BF16, "BF16", 1, 2},
    {DType::F8_E4M3, "F8_E4M3", 1, 1}, {DType::F8_E5M2, "F8_E5M2", 1, 1},
    {DType::I8, "I8", 1, 1},           {DType::I16, "I16", 1, 2},
    {DType::I32, "I32", 1, 4},         {DType::I64, "I64", 1, 8},
    {DType::U8, "U8", 1, 1},           {DType::U16, "U16", 1, 2},
    {DType::U32, "U32", 1, 4},         {DType::U64, "U64", 1, 8},
    {DType::BOOL, "BOOL", 1, 1},       {DType::Q8_0, "Q8_0", 32, 34},
    {DType::Q4_0, "Q4_0", 32, 18},     {DType::Q4_K, "Q4_K", 256, 144},
    {DType::Q5_K, "Q5_K", 256, 176},   {DType::Q6_K, "Q6_K", 256, 210},
    {DType::NVFP4, "NVFP4", 16, 8},
};
static_assert(std::size(kInfo) == size_t(DType::NVFP4) + 1, "one row per DType, in order");
const Info& info(DType t) {
  return kInfo[static_cast<int>(t)];
}
}  // namespace

int dtype_block_elems(DType t) {
  return info(t).block_elems;
}
int dtype_block_bytes(DType t) {
  return info(t).block_bytes;
}
std::string_view dtype_name(DType t) {
  return info(t).name;
}

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const auto& i : kInfo) {
    if (i.block_elems == 1 && s == i.name) {
      *out = i.t;
      return true;
    }
  }
  return false;
}

size_t dtype_bytes(DType t, int64_t n) {
  const Info& i = info(t);
  if (n < 0 || n % i.block_elems != 0)
    fail("[dtype] {} elements is not a whole number of {} blocks of {}", n, i.name, i.block_elems);
  return size_t(n / i.block_elems) * size_t(i.block_bytes);
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::F64:
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F8_E4M3:
    case DType::F8_E5M2:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::NVFP4:
      return true;
    default:
      return false;
  }
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      u = std::bit_cast<uint32_t>(f) | sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(u);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // overflow (rounds to inf) or inf
  if (a < 0x38800000u) {                        // subnormal or zero in f16
    // value / 2^-24, rounded to nearest even
    float v = std::bit_cast<float>(a) * 16777216.0f;
    return sign | uint16_t(std::nearbyint(v));
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xfffu + mant_odd;
  return sign | uint16_t((a - 0x38000000u) >> 13);
}

float fp8_e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0)
    r = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  else
    r = std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
  return sign ? -r : r;
}

uint8_t f32_to_fp8_e4m3(float f) {
  const uint8_t sign = uint8_t((std::bit_cast<uint32_t>(f) >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f)  // subnormal steps of 2^-9 (the scaling is exact); 8 steps = 0x08, 2^-6
    return sign | uint8_t(std::nearbyint(a * 512.0f));
  uint32_t u = std::bit_cast<uint32_t>(a);
  u += 0x7ffffu + ((u >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
  const uint32_t e = (u >> 23) - 127 + 7, m = (u >> 20) & 7u;
  return sign | uint8_t(e << 3 | m);  // a < 448 rounds to at most 448 (e 15, m 6)
}

float fp4_e2m1_to_f32(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7];
  return code & 8 ? -m : m;
}

uint8_t f32_to_fp4_e2m1(float f) {
  if (std::isnan(f)) return 0;
  const float a = std::fabs(f);
  // Midpoints between neighbours; a tie goes to the even code (mantissa bit 0).
  uint8_t c;
  if (a <= 0.25f)
    c = 0;
  else if (a < 0.75f)
    c = 1;
  else if (a <= 1.25f)
    c = 2;
  else if (a < 1.75f)
    c = 3;
  else if (a <= 2.5f)
    c = 4;
  else if (a < 3.5f)
    c = 5;
  else if (a <= 5.0f)
    c = 6;
  else
    c = 7;
  return f < 0.0f ? uint8_t(c | 8) : c;
}

float fp8_e5m2_to_f32(uint8_t v) {
  return f16_to_f32(uint16_t(v) << 8);
}

double dtype_read_f64(DType t, const void* data, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  auto ld = [&](auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (t) {
    case DType::F64:
      return ld(double{});
    case DType::F32:
      return ld(float{});
    case DType::F16:
      return f16_to_f32(ld(uint16_t{}));
    case DType::BF16:
      return bf16_to_f32(ld(uint16_t{}));
    case DType::F8_E4M3:
      return fp8_e4m3_to_f32(p[i]);
    case DType::F8_E5M2:
      return fp8_e5m2_to_f32(p[i]);
    case DType::I8:
      return ld(int8_t{});
    case DType::I16:
      return ld(int16_t{});
    case DType::I32:
      return ld(int32_t{});
    case DType::I64:
      return double(ld(int64_t{}));
    case DType::U8:
      return ld(uint8_t{});
    case DType::U16:
      return ld(uint16_t{});
    case DType::U32:
      return ld(uint32_t{});
    case DType::U64:
      return double(ld(uint64_t{}));
    case DType::BOOL:
      return p[i] ? 1.0 : 0.0;
    case DType::Q8_0: {
      const uint8_t* b = p + (i / 32) * 34;
      uint16_t d;
      std::memcpy(&d, b, 2);
      return double(f16_to_f32(d)) * double(int8_t(b[2 + i % 32]));
    }
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::NVFP4:
      // Only whole rows are decoded (ref::weight_row_f32); GGUF never stores vectors in them.
      fail("[dtype] element reads of {} tensors are not supported (dequantize whole rows)",
           dtype_name(t));
  }
  fail("[dtype] unknown dtype");
}

}  // namespace basalt
