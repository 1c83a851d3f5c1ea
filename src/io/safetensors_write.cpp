#include "io/safetensors_write.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace basalt::io {

void safetensors_write(const std::string& path, std::vector<TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorToWrite& a, const TensorToWrite& b) { return a.name < b.name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (dtype_block_elems(t.dtype) != 1)
      fail("[safetensors] {}: tensor '{}' has dtype {}, which safetensors cannot hold", path,
           t.name, dtype_name(t.dtype));
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t bytes = dtype_bytes(t.dtype, n);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("[safetensors] {}: cannot write: {}", tmp, std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f) != n) {
      const int e = errno;
      std::fclose(f);
      std::remove(tmp.c_str());
      fail("[safetensors] {}: write failed: {}", tmp, std::strerror(e));
    }
  };
  const uint64_t hlen = h.size();
  put(&hlen, 8);
  put(h.data(), h.size());
  std::vector<uint8_t> buf;
  const int64_t chunk = int64_t(1) << 22;  // elements per fill call
  for (const TensorToWrite& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t esize = size_t(dtype_block_bytes(t.dtype));
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t count = std::min(chunk, n - first);
      buf.resize(size_t(count) * esize);
      t.fill(first, count, buf.data());
      put(buf.data(), buf.size());
    }
  }
  if (std::fclose(f) != 0) fail("[safetensors] {}: close failed: {}", tmp, std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("[safetensors] {}: cannot rename into place: {}", path, ec.message());
}

}  // namespace basalt::io
