#include "io/gguf_write.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"

namespace basalt::io {

static_assert(std::endian::native == std::endian::little, "GGUF is written as little-endian");

namespace {

enum : uint32_t {
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64
};

constexpr int kMaxArrayNesting = 8;  // what io/gguf.cpp reads back
constexpr int64_t kChunkElems = int64_t(1) << 22;

GgufValue make(uint32_t type, decltype(GgufValue::v) v) {
  GgufValue g;
  g.v = std::move(v);
  g.type = type;
  return g;
}

struct Bytes {
  std::vector<uint8_t> b;
  void put(const void* p, size_t n) {
    const size_t at = b.size();
    b.resize(at + n);
    std::memcpy(b.data() + at, p, n);
  }
  template <typename T>
  void pod(T v) {
    put(&v, sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    put(s.data(), s.size());
  }
};

class ValueWriter {
 public:
  ValueWriter(Bytes& out, const std::string& path) : out_(out), path_(path) {}

  void write(const GgufValue& v, uint32_t type, const std::string& key, int depth) {
    switch (type) {
      case kU8:
        return out_.pod(uint8_t(integer(v, key, 0, UINT8_MAX)));
      case kI8:
        return out_.pod(int8_t(integer(v, key, INT8_MIN, INT8_MAX)));
      case kU16:
        return out_.pod(uint16_t(integer(v, key, 0, UINT16_MAX)));
      case kI16:
        return out_.pod(int16_t(integer(v, key, INT16_MIN, INT16_MAX)));
      case kU32:
        return out_.pod(uint32_t(integer(v, key, 0, UINT32_MAX)));
      case kI32:
        return out_.pod(int32_t(integer(v, key, INT32_MIN, INT32_MAX)));
      case kU64:
        return out_.pod(uint64_t(integer(v, key, 0, UINT64_MAX)));
      case kI64:
        return out_.pod(int64_t(integer(v, key, INT64_MIN, INT64_MAX)));
      case kF32:
        return out_.pod(float(number(v, key)));
      case kF64:
        return out_.pod(number(v, key));
      case kBool: {
        const bool* b = std::get_if<bool>(&v.v);
        if (!b) mismatch(key, type, "bool");
        return out_.pod(uint8_t(*b ? 1 : 0));
      }
      case kString: {
        const std::string* s = std::get_if<std::string>(&v.v);
        if (!s) mismatch(key, type, "string");
        return out_.str(*s);
      }
      case kArray: {
        const GgufArray* a = std::get_if<GgufArray>(&v.v);
        if (!a) mismatch(key, type, "array");
        if (depth >= kMaxArrayNesting)
          fail("[gguf] {}: key '{}' has arrays nested deeper than {}", path_, key,
               kMaxArrayNesting);
        const uint32_t et = a->empty() ? kU8 : (*a)[0].type;
        out_.pod(et);
        out_.pod<uint64_t>(a->size());
        for (const GgufValue& e : *a) {
          if (e.type != et)
            fail("[gguf] {}: key '{}' is an array of mixed types {} and {}", path_, key, et,
                 e.type);
          write(e, et, key, depth + 1);
        }
        return;
      }
      default:
        fail("[gguf] {}: key '{}' has unknown value type {}", path_, key, type);
    }
  }

 private:
  [[noreturn]] void mismatch(const std::string& key, uint32_t type, const char* want) const {
    fail("[gguf] {}: key '{}' has value type {} but does not hold a {}", path_, key, type, want);
  }
  __int128 integer(const GgufValue& v, const std::string& key, __int128 lo, __int128 hi) const {
    __int128 x;
    if (const auto* u = std::get_if<uint64_t>(&v.v))
      x = *u;
    else if (const auto* i = std::get_if<int64_t>(&v.v))
      x = *i;
    else
      mismatch(key, v.type, "integer");
    if (x < lo || x > hi)
      fail("[gguf] {}: key '{}' value {} does not fit its type {}", path_, key, int64_t(x), v.type);
    return x;
  }
  double number(const GgufValue& v, const std::string& key) const {
    if (const auto* d = std::get_if<double>(&v.v)) return *d;
    mismatch(key, v.type, "float");
  }
  Bytes& out_;
  const std::string& path_;
};

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace

GgufValue gguf_u32(uint32_t v) {
  return make(kU32, uint64_t(v));
}
GgufValue gguf_i32(int32_t v) {
  return make(kI32, int64_t(v));
}
GgufValue gguf_u64(uint64_t v) {
  return make(kU64, v);
}
GgufValue gguf_f32(float v) {
  return make(kF32, double(v));
}
GgufValue gguf_bool(bool v) {
  return make(kBool, v);
}
GgufValue gguf_str(std::string v) {
  return make(kString, std::move(v));
}
GgufValue gguf_strs(const std::vector<std::string>& v) {
  GgufArray a;
  a.reserve(v.size());
  for (const std::string& s : v) a.push_back(gguf_str(s));
  return make(kArray, std::move(a));
}
GgufValue gguf_i32s(const std::vector<int32_t>& v) {
  GgufArray a;
  a.reserve(v.size());
  for (int32_t x : v) a.push_back(gguf_i32(x));
  return make(kArray, std::move(a));
}
GgufValue gguf_f32s(const std::vector<float>& v) {
  GgufArray a;
  a.reserve(v.size());
  for (float x : v) a.push_back(gguf_f32(x));
  return make(kArray, std::move(a));
}

bool gguf_type_id(DType t, uint32_t* id) {
  switch (t) {
    case DType::F32:
      return *id = 0, true;
    case DType::F16:
      return *id = 1, true;
    case DType::Q4_0:
      return *id = 2, true;
    case DType::Q8_0:
      return *id = 8, true;
    case DType::Q4_K:
      return *id = 12, true;
    case DType::Q5_K:
      return *id = 13, true;
    case DType::Q6_K:
      return *id = 14, true;
    case DType::BF16:
      return *id = 30, true;
    default:
      return false;
  }
}

void gguf_write(const std::string& path, const GgufMetadata& metadata,
                const std::vector<TensorToWrite>& tensors) {
  // Everything is checked and the header built before the file is created.
  Bytes h;
  h.put("GGUF", 4);
  h.pod<uint32_t>(3);
  h.pod<uint64_t>(tensors.size());
  h.pod<uint64_t>(metadata.size());
  uint64_t alignment = 32;
  std::set<std::string> seen;
  ValueWriter vw(h, path);
  for (const auto& [key, value] : metadata) {
    if (!seen.insert(key).second) fail("[gguf] {}: duplicate metadata key '{}'", path, key);
    if (key == "general.alignment") {
      const bool integer =
          std::holds_alternative<uint64_t>(value.v) || std::holds_alternative<int64_t>(value.v);
      if (!integer || value.as_int() <= 0 || !std::has_single_bit(uint64_t(value.as_int())))
        fail("[gguf] {}: general.alignment must be a power of two", path);
      alignment = uint64_t(value.as_int());
    }
    h.str(key);
    h.pod<uint32_t>(value.type);
    vw.write(value, value.type, key, 0);
  }

  seen.clear();
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    uint32_t type;
    if (!gguf_type_id(t.dtype, &type))
      fail(
          "[gguf] {}: tensor '{}' has dtype {}, which GGUF files cannot hold here (F32, F16, "
          "BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)",
          path, t.name, dtype_name(t.dtype));
    if (!seen.insert(t.name).second) fail("[gguf] {}: tensor '{}' appears twice", path, t.name);
    if (t.shape.empty() || t.shape.size() > 4)
      fail("[gguf] {}: tensor '{}' has {} dimensions (1 to 4)", path, t.name, t.shape.size());
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("[gguf] {}: tensor '{}' has shape {}", path, t.name, shape_str(t.shape));
      n *= d;
    }
    if (t.shape.back() % dtype_block_elems(t.dtype) != 0)
      fail("[gguf] {}: tensor '{}' has rows of {} elements, not whole {}-element {} blocks", path,
           t.name, t.shape.back(), dtype_block_elems(t.dtype), dtype_name(t.dtype));
    h.str(t.name);
    h.pod<uint32_t>(uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)  // GGUF lists innermost first
      h.pod<uint64_t>(uint64_t(*it));
    h.pod<uint32_t>(type);
    h.pod<uint64_t>(offset);
    sizes.push_back(dtype_bytes(t.dtype, n));
    offset += align_up(sizes.back(), alignment);
  }
  h.b.resize(align_up(h.b.size(), alignment), 0);

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("[gguf] {}: cannot write: {}", tmp, std::strerror(errno));
  struct Guard {  // a failed write (or a throwing fill) leaves no file behind
    FILE*& f;
    const std::string& tmp;
    ~Guard() {
      if (f) std::fclose(f), std::remove(tmp.c_str());
    }
  } guard{f, tmp};
  auto put = [&](const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f) != n)
      fail("[gguf] {}: write failed: {}", tmp, std::strerror(errno));
  };
  put(h.b.data(), h.b.size());
  std::vector<uint8_t> buf;
  const std::vector<uint8_t> zeros(alignment, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    const int64_t row = t.shape.back();
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t chunk = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(row, 1)) * row;
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t count = std::min(chunk, n - first);
      buf.resize(dtype_bytes(t.dtype, count));
      t.fill(first, count, buf.data());
      put(buf.data(), buf.size());
    }
    put(zeros.data(), size_t(align_up(sizes[i], alignment) - sizes[i]));
  }
  const int closed = std::fclose(f);
  f = nullptr;
  if (closed != 0) {
    std::remove(tmp.c_str());
    fail("[gguf] {}: close failed: {}", tmp, std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("[gguf] {}: cannot rename into place: {}", path, ec.message());
}

}  // namespace basalt::io
