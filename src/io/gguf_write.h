// Writing GGUF v3 files (little-endian): metadata key/values in the order given, tensor infos,
// then each tensor's data at a multiple of general.alignment (32 unless the metadata sets it),
// produced by its fill callback in pieces and streamed to disk, so an 8B model never sits in
// memory. Written to PATH.tmp and renamed into place, so readers never see a partial file.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors_write.h"

namespace basalt::io {

// Metadata in file order. Each value is written with its GgufValue::type (0 UINT8 ... 12
// FLOAT64); an array's element type is its elements' type (they must all agree; an empty array
// is written as an array of UINT8, as gguf-py does for bytes).
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_str(std::string v);
GgufValue gguf_strs(const std::vector<std::string>& v);
GgufValue gguf_i32s(const std::vector<int32_t>& v);
GgufValue gguf_f32s(const std::vector<float>& v);

// The ggml type id of t (F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30);
// false for types GGUF files written here cannot hold.
bool gguf_type_id(DType t, uint32_t* id);

// tensors: shapes row-major (1 to 4 dims, as basalt's reader reports them), dtype any type
// gguf_type_id accepts, rows (the last dimension) whole blocks. fill(first, count, out) is
// called for consecutive ranges of whole rows (first and count in elements, ~4M per call) and
// writes dtype_bytes(dtype, count) bytes. Throws "[gguf] PATH: ..." on a bad key, value, shape
// or dtype (before anything is written) and on I/O errors.
void gguf_write(const std::string& path, const GgufMetadata& metadata,
                const std::vector<TensorToWrite>& tensors);

}  // namespace basalt::io
