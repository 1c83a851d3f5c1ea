// Writing safetensors files: header (names sorted, offsets in order, padded with spaces to a
// multiple of 8 bytes), then each tensor's bytes produced by a callback, streamed to disk so a
// multi-gigabyte checkpoint never sits in memory. Written to a temporary file renamed into
// place, so readers never see a half-written file.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace basalt::io {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;  // plain types here; GGUF block types too in io/gguf_write.h
  std::vector<int64_t> shape;
  // Fills `out` (the tensor's bytes, dtype_bytes(dtype, numel) long), in pieces: called with
  // (element offset, element count, destination) for consecutive ranges.
  std::function<void(int64_t first, int64_t count, uint8_t* out)> fill;
};

// Throws basalt::Error("[safetensors] PATH: ...") on I/O errors or a non-plain dtype.
void safetensors_write(const std::string& path, std::vector<TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace basalt::io
