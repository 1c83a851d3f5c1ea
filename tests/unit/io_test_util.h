// Writers for small safetensors / GGUF files built inside tests, and file helpers.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace basalt::test {

using Bytes = std::vector<uint8_t>;

inline void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  ASSERT_TRUE(f.good()) << path;
}
inline void write_file(const std::string& path, const Bytes& b) {
  write_file(path, b.data(), b.size());
}
inline void write_file(const std::string& path, const std::string& s) {
  write_file(path, s.data(), s.size());
}

template <typename T>
void put(Bytes& b, T v) {
  size_t at = b.size();      // resize + memcpy: insert() into an empty vector trips GCC 12's
  b.resize(at + sizeof(T));  // -Wstringop-overflow false alarm
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// safetensors = u64 header length, header JSON, data.
inline Bytes safetensors_blob(const std::string& header, const Bytes& data) {
  Bytes b;
  put<uint64_t>(b, header.size());
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

struct SafetensorsWriter {
  nlohmann::json header = nlohmann::json::object();
  Bytes data;
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const Bytes& bytes) {
    header[name] = {{"dtype", dtype},
                    {"shape", shape},
                    {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  Bytes build() const { return safetensors_blob(header.dump(), data); }
};

// GGUF writer: metadata and tensors in file order, data aligned as the format says.
struct GgufWriter {
  uint32_t version = 3;
  uint64_t alignment = 32;
  Bytes kv;
  uint64_t n_kv = 0;
  struct T {
    std::string name;
    std::vector<uint64_t> ne;  // innermost first
    uint32_t type;
    Bytes data;
  };
  std::vector<T> tensors;

  static void str(Bytes& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  // Key and type id; the caller appends the value bytes with put()/str().
  Bytes& key(const std::string& k, uint32_t type) {
    ++n_kv;
    str(kv, k);
    put<uint32_t>(kv, type);
    return kv;
  }
  void kv_u32(const std::string& k, uint32_t v) { put<uint32_t>(key(k, 4), v); }
  void kv_str(const std::string& k, const std::string& v) { str(key(k, 8), v); }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, Bytes data) {
    tensors.push_back({name, std::move(ne), type, std::move(data)});
  }

  Bytes build() const {
    Bytes b{'G', 'G', 'U', 'F'};  // not insert() into empty: GCC 12 -Wstringop-overflow false alarm
    put<uint32_t>(b, version);
    put<uint64_t>(b, tensors.size());
    put<uint64_t>(b, n_kv);
    b.insert(b.end(), kv.begin(), kv.end());
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors) {
      str(b, t.name);
      put<uint32_t>(b, uint32_t(t.ne.size()));
      for (auto d : t.ne) put<uint64_t>(b, d);
      put<uint32_t>(b, t.type);
      put<uint64_t>(b, off);
      offs.push_back(off);
      off += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    if (!tensors.empty()) {
      b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
      size_t base = b.size();
      for (size_t i = 0; i < tensors.size(); ++i) {
        b.resize(base + offs[i], 0);
        b.insert(b.end(), tensors[i].data.begin(), tensors[i].data.end());
      }
    }
    return b;
  }
};

template <typename T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace basalt::test
