// Blob: a read-only byte range that keeps its backing storage alive (an mmap'd file,
// bytes embedded in the binary, or a heap buffer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace basalt {

struct Blob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::string name;             // file path or a label, used in error messages
  std::shared_ptr<void> owner;  // keeps data alive

  std::span<const uint8_t> bytes() const { return {data, size}; }
};

// Maps a whole file read-only. Throws basalt::Error("[io] PATH: ...") on failure.
Blob blob_map_file(const std::string& path);
// Bytes not owned (static storage, e.g. the embedded model).
Blob blob_static(const void* data, size_t size, std::string name);
Blob blob_from_vector(std::vector<uint8_t> bytes, std::string name);
// Reads a whole small text file; throws basalt::Error on failure.
std::string read_text_file(const std::string& path);

}  // namespace basalt
