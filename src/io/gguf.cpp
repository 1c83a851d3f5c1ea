#include "io/gguf.h"

#include <bit>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"

namespace basalt::io {

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

namespace {

// ggml_type names by id (ggml.h); "" marks ids removed from the format.
constexpr std::string_view kGgmlTypeNames[] = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "",         "",         "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
};

bool supported_type(uint32_t t, DType* out) {
  switch (t) {
    case 0:
      *out = DType::F32;
      return true;
    case 1:
      *out = DType::F16;
      return true;
    case 2:
      *out = DType::Q4_0;
      return true;
    case 8:
      *out = DType::Q8_0;
      return true;
    case 12:
      *out = DType::Q4_K;
      return true;
    case 13:
      *out = DType::Q5_K;
      return true;
    case 14:
      *out = DType::Q6_K;
      return true;
    case 30:
      *out = DType::BF16;
      return true;
    default:
      return false;
  }
}

constexpr uint32_t kMaxDims = 4;     // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;  // bounds recursion on hostile files
constexpr uint64_t kMaxStringBytes = 1u << 30;

// Every read is checked against the blob; a short file throws, never reads past the end.
class Reader {
 public:
  explicit Reader(const Blob& b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > left())
      fail("[gguf] {}: truncated: {} needs {} bytes at offset {}, file has {}", b_.name, what, n,
           pos_, b_.size);
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(std::string_view what) {
    uint64_t n = read<uint64_t>(what);
    if (n > kMaxStringBytes)
      fail("[gguf] {}: {} has absurd length {} at offset {}", b_.name, what, n, pos_ - 8);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(b_.data + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const Blob& b_;
  size_t pos_ = 0;
};

// Smallest encoding of one value of type t; bounds array counts before allocating.
uint64_t min_value_bytes(uint32_t t) {
  switch (t) {
    case 0:
    case 1:
    case 7:
      return 1;
    case 2:
    case 3:
      return 2;
    case 4:
    case 5:
    case 6:
      return 4;
    case 8:
      return 8;
    case 9:
      return 12;
    default:
      return 8;
  }
}

GgufValue read_value(Reader& r, uint32_t type, const std::string& key, const std::string& file,
                     int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case 0:
      v.v = uint64_t(r.read<uint8_t>(key));
      break;
    case 1:
      v.v = int64_t(r.read<int8_t>(key));
      break;
    case 2:
      v.v = uint64_t(r.read<uint16_t>(key));
      break;
    case 3:
      v.v = int64_t(r.read<int16_t>(key));
      break;
    case 4:
      v.v = uint64_t(r.read<uint32_t>(key));
      break;
    case 5:
      v.v = int64_t(r.read<int32_t>(key));
      break;
    case 6:
      v.v = double(r.read<float>(key));
      break;
    case 7: {
      uint8_t b = r.read<uint8_t>(key);
      if (b > 1) fail("[gguf] {}: key '{}' has bool value {} (not 0 or 1)", file, key, b);
      v.v = b != 0;
      break;
    }
    case 8:
      v.v = r.str(key);
      break;
    case 9: {
      if (depth >= kMaxArrayNesting)
        fail("[gguf] {}: key '{}' has arrays nested deeper than {}", file, key, kMaxArrayNesting);
      uint32_t et = r.read<uint32_t>(key);
      uint64_t n = r.read<uint64_t>(key);
      if (et > 12) fail("[gguf] {}: key '{}' is an array of unknown value type {}", file, key, et);
      if (n > r.left() / min_value_bytes(et))
        fail("[gguf] {}: key '{}' array of {} elements runs past the end of the file", file, key,
             n);
      GgufArray a;
      a.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) a.push_back(read_value(r, et, key, file, depth + 1));
      v.v = std::move(a);
      break;
    }
    case 10:
      v.v = r.read<uint64_t>(key);
      break;
    case 11:
      v.v = r.read<int64_t>(key);
      break;
    case 12:
      v.v = r.read<double>(key);
      break;
    default:
      fail("[gguf] {}: key '{}' has unknown value type {}", file, key, type);
  }
  return v;
}

std::string_view value_kind(const GgufValue& v) {
  switch (v.v.index()) {
    case 0:
      return "unsigned integer";
    case 1:
      return "integer";
    case 2:
      return "float";
    case 3:
      return "bool";
    case 4:
      return "string";
    default:
      return "array";
  }
}

[[noreturn]] void mismatch(const GgufValue& v, std::string_view want) {
  fail("[gguf] metadata value has type {}, expected {}", value_kind(v), want);
}

}  // namespace

std::string_view gguf_type_name(uint32_t type) {
  if (type < std::size(kGgmlTypeNames) && !kGgmlTypeNames[type].empty())
    return kGgmlTypeNames[type];
  return "";
}

const std::string& GgufValue::as_string() const {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  mismatch(*this, "string");
}
const GgufArray& GgufValue::as_array() const {
  if (auto* a = std::get_if<GgufArray>(&v)) return *a;
  mismatch(*this, "array");
}
int64_t GgufValue::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(INT64_MAX)) fail("[gguf] metadata value {} does not fit in int64", *u);
    return int64_t(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  mismatch(*this, "integer");
}
double GgufValue::as_float() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return double(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  mismatch(*this, "number");
}
bool GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  mismatch(*this, "bool");
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}
const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("[gguf] {}: missing key {}", name, key);
  return *v;
}

GgufFile gguf_parse(const Blob& blob) {
  const std::string& file = blob.name;
  GgufFile g;
  g.name = file;
  if (blob.size < 4 || std::memcmp(blob.data, "GGUF", 4) != 0)
    fail("[gguf] {}: not a GGUF file (no \"GGUF\" magic)", file);
  Reader r(blob);
  r.read<uint32_t>("magic");
  g.version = r.read<uint32_t>("version");
  if (g.version != 2 && g.version != 3)
    fail("[gguf] {}: unsupported GGUF version {} (supported: 2, 3)", file, g.version);
  uint64_t n_tensors = r.read<uint64_t>("tensor count");
  uint64_t n_kv = r.read<uint64_t>("metadata count");
  // A key/value takes at least 13 bytes and a tensor info 24: larger counts cannot fit.
  if (n_kv > r.left() / 13)
    fail("[gguf] {}: metadata count {} is absurd for a file of {} bytes", file, n_kv, blob.size);
  if (n_tensors > r.left() / 24)
    fail("[gguf] {}: tensor count {} is absurd for a file of {} bytes", file, n_tensors, blob.size);

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str("metadata key");
    uint32_t type = r.read<uint32_t>(key);
    GgufValue v = read_value(r, type, key, file, 0);
    if (!g.metadata.emplace(key, std::move(v)).second)
      fail("[gguf] {}: duplicate metadata key '{}'", file, key);
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (!std::holds_alternative<uint64_t>(a->v) && !std::holds_alternative<int64_t>(a->v))
      fail("[gguf] {}: general.alignment has type {}, expected an integer", file, value_kind(*a));
    int64_t al = a->as_int();
    if (al <= 0 || !std::has_single_bit(uint64_t(al)))
      fail("[gguf] {}: general.alignment {} is not a power of two", file, al);
    g.alignment = uint64_t(al);
  }

  struct Info {
    TensorView t;
    uint64_t offset;
  };
  std::vector<Info> infos;
  std::set<std::string> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info in;
    in.t.name = r.str("tensor name");
    const std::string& tn = in.t.name;
    if (!seen.insert(tn).second) fail("[gguf] {}: tensor '{}' appears twice", file, tn);
    uint32_t n_dims = r.read<uint32_t>(tn);
    if (n_dims > kMaxDims)
      fail("[gguf] {}: tensor '{}' has {} dimensions (at most {})", file, tn, n_dims, kMaxDims);
    std::vector<int64_t> ne(n_dims);
    // The product of the non-zero dims must fit, so no order of multiplying the shape overflows
    // (TensorView::numel goes outermost first; ne[] = {0, 2^62, 2^62} overflowed it: fuzz_gguf).
    int64_t numel = 1, nonzero = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t x = r.read<uint64_t>(tn);
      if (x > uint64_t(INT64_MAX) ||
          (x != 0 && __builtin_mul_overflow(nonzero, int64_t(x), &nonzero)))
        fail("[gguf] {}: tensor '{}' has an absurd dimension {}", file, tn, x);
      ne[d] = int64_t(x);
      numel *= ne[d];  // 0 or equal to nonzero: cannot overflow
    }
    uint32_t type = r.read<uint32_t>(tn);
    in.offset = r.read<uint64_t>(tn);
    if (!supported_type(type, &in.t.dtype)) {
      std::string_view tname = gguf_type_name(type);
      if (tname.empty()) fail("[gguf] {}: tensor '{}' has unknown tensor type {}", file, tn, type);
      fail("[gguf] {}: tensor '{}' has unsupported tensor type {}", file, tn, tname);
    }
    int be = dtype_block_elems(in.t.dtype);
    // A 0-dim tensor is one element (a 0-dim Q8_0 one got 0 bytes for it: fuzz_gguf).
    int64_t row = n_dims > 0 ? ne[0] : 1;
    if (row % be != 0)
      fail(
          "[gguf] {}: tensor '{}' has rows of {} elements, not a whole number of {}-element {} "
          "blocks",
          file, tn, row, be, dtype_name(in.t.dtype));
    in.t.shape.assign(ne.rbegin(), ne.rend());  // GGUF lists innermost first
    uint64_t blocks = uint64_t(numel) / uint64_t(be);
    uint64_t nb = blocks * uint64_t(dtype_block_bytes(in.t.dtype));
    if (blocks != 0 && nb / blocks != uint64_t(dtype_block_bytes(in.t.dtype)))
      fail("[gguf] {}: tensor '{}' shape {} is absurdly large", file, tn, shape_str(in.t.shape));
    in.t.nbytes = size_t(nb);
    infos.push_back(std::move(in));
  }

  uint64_t data_start = (uint64_t(r.pos()) + g.alignment - 1) / g.alignment * g.alignment;
  for (auto& in : infos) {
    const std::string& tn = in.t.name;
    if (in.offset % g.alignment != 0)
      fail("[gguf] {}: tensor '{}' data offset {} is misaligned (alignment {})", file, tn,
           in.offset, g.alignment);
    uint64_t begin = data_start + in.offset;
    if (begin < data_start || begin > blob.size || in.t.nbytes > blob.size - begin)
      fail("[gguf] {}: tensor '{}' data [{}, +{} bytes) runs past the end of the file ({} bytes)",
           file, tn, in.offset, in.t.nbytes, blob.size);
    in.t.data = blob.data + begin;
    g.tensors.add(std::move(in.t));
  }
  g.tensors.keep(blob);
  return g;
}

GgufFile gguf_load_file(const std::string& path) {
  return gguf_parse(blob_map_file(path));
}

}  // namespace basalt::io
