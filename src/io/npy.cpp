#include "io/npy.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/blob.h"
#include "core/error.h"

namespace basalt::io {

static_assert(std::endian::native == std::endian::little, "npy '<' data is read natively");

namespace {

constexpr char kMagic[] = "\x93NUMPY";

std::string header_for(const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" keeps its comma, "(2, 3)" not
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + h.size() + 1;  // magic+version+len, dict, '\n'
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  return h;
}

// Value of `'key': ` in a NumPy header dict, up to the next ',' or ')' (for the shape tuple).
std::string_view dict_value(std::string_view h, std::string_view key, const std::string& path) {
  std::string k(1, '\'');  // built by append: GCC 12 warns falsely (-Wrestrict) on "'" + s
  k.append(key).push_back('\'');
  size_t at = h.find(k);
  if (at == std::string_view::npos) fail("[npy] {}: header has no '{}': {}", path, key, h);
  size_t v = h.find(':', at + k.size());
  if (v == std::string_view::npos) fail("[npy] {}: malformed header: {}", path, h);
  v = h.find_first_not_of(' ', v + 1);
  if (v == std::string_view::npos) fail("[npy] {}: malformed header: {}", path, h);
  size_t end = h[v] == '(' ? h.find(')', v) : h.find_first_of(",}", v);
  if (end == std::string_view::npos) fail("[npy] {}: malformed header: {}", path, h);
  return h.substr(v, end - v + (h[v] == '(' ? 1 : 0));
}

std::vector<int64_t> parse_shape(std::string_view s, const std::string& path) {
  std::vector<int64_t> shape;
  size_t i = 1;  // after '('
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size() || s[i] == ')') break;
    if (s[i] < '0' || s[i] > '9') fail("[npy] {}: bad shape {}", path, s);
    int64_t d = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, s[i] - '0', &d))
        fail("[npy] {}: shape {} overflows", path, s);
      ++i;
    }
    shape.push_back(d);
  }
  return shape;
}

}  // namespace

void npy_write_f32(const std::string& path, const float* data, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) fail("[npy] {}: negative dimension in shape", path);
    n *= d;
  }
  std::string h = header_for(shape);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("[npy] {}: cannot create {}: {}", path, tmp, std::strerror(errno));
  uint16_t hlen = uint16_t(h.size());
  bool ok = std::fwrite(kMagic, 1, 6, f) == 6 && std::fputc(1, f) != EOF &&
            std::fputc(0, f) != EOF && std::fwrite(&hlen, 2, 1, f) == 1 &&
            std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
            (n == 0 || std::fwrite(data, sizeof(float), size_t(n), f) == size_t(n));
  int e = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) e = errno;
    std::remove(tmp.c_str());
    fail("[npy] {}: write failed: {}", path, std::strerror(e));
  }
}

NpyArray npy_read(const std::string& path) {
  Blob b = blob_map_file(path);
  if (b.size < 10 || std::memcmp(b.data, kMagic, 6) != 0)
    fail("[npy] {}: not a .npy file (no \\x93NUMPY magic)", path);
  uint8_t major = b.data[6];
  size_t hlen, hstart;
  if (major == 1) {
    uint16_t l;
    std::memcpy(&l, b.data + 8, 2);
    hlen = l, hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size < 12) fail("[npy] {}: truncated header", path);
    uint32_t l;
    std::memcpy(&l, b.data + 8, 4);
    hlen = l, hstart = 12;
  } else {
    fail("[npy] {}: unsupported .npy version {}.{}", path, major, b.data[7]);
  }
  if (hlen > b.size - hstart) fail("[npy] {}: header length {} runs past the file", path, hlen);
  std::string_view h(reinterpret_cast<const char*>(b.data) + hstart, hlen);
  std::string_view descr = dict_value(h, "descr", path);
  std::string_view fortran = dict_value(h, "fortran_order", path);
  NpyArray a;
  a.shape = parse_shape(dict_value(h, "shape", path), path);
  if (fortran != "False") fail("[npy] {}: Fortran-order arrays are not supported", path);
  size_t elem;
  if (descr == "'<f4'")
    elem = 4;
  else if (descr == "'<f8'")
    elem = 8;
  else
    fail("[npy] {}: dtype {} is not supported (only '<f4' and '<f8')", path, descr);
  int64_t n = 1;
  for (auto d : a.shape)
    if (__builtin_mul_overflow(n, d, &n)) fail("[npy] {}: shape overflows", path);
  size_t data_at = hstart + hlen;
  uint64_t need = uint64_t(n) * elem;
  if (uint64_t(n) > (b.size - data_at) / elem || need != b.size - data_at)
    fail("[npy] {}: data is {} bytes, shape {} needs {}", path, b.size - data_at,
         std::string(dict_value(h, "shape", path)), need);
  a.data.resize(size_t(n));
  const uint8_t* p = b.data + data_at;
  if (n == 0) return a;  // memcpy from an empty vector's null data() is UB
  if (elem == 4) {
    std::memcpy(a.data.data(), p, size_t(need));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      a.data[size_t(i)] = float(d);
    }
  }
  return a;
}

}  // namespace basalt::io
