// GGUF v3 (also reads v2): metadata key/values, tensor infos, aligned tensor data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/blob.h"
#include "io/tensor_store.h"

namespace basalt::io {

struct GgufValue;
using GgufArray = std::vector<GgufValue>;
struct GgufValue {
  // integers of every width are widened to int64/uint64; f32/f64 to double.
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;
  uint32_t type = 0;  // the value type id as stored (0 UINT8 ... 12 FLOAT64), for display

  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_array() const { return std::holds_alternative<GgufArray>(v); }
  const std::string& as_string() const;  // throws if not a string
  const GgufArray& as_array() const;     // throws if not an array
  int64_t as_int() const;                // any integer or bool; throws otherwise
  double as_float() const;               // any number
  bool as_bool() const;
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::map<std::string, GgufValue> metadata;
  // Tensors with GGUF's own names ("token_embd.weight", "blk.0.attn_q.weight", ...).
  // Shapes are converted to row-major order (outermost first), i.e. GGUF's ne[] reversed,
  // so a [n_out, n_in] matrix reads like a PyTorch weight.
  TensorStore tensors;

  const GgufValue* find(const std::string& key) const;
  const GgufValue& get(const std::string& key) const;  // throws "[gguf] FILE: missing key K"
  std::string name;                                    // file path, for messages
};

// Parses a GGUF blob. Tensor types supported: F32, F16, BF16, Q8_0 (others: "[gguf] FILE:
// tensor 'x' has unsupported tensor type Q4_K"). Vocab-only files (no tensors) are fine.
GgufFile gguf_parse(const Blob& blob);
GgufFile gguf_load_file(const std::string& path);
// ggml tensor type name by id ("Q4_K" for 12); "" for ids ggml does not define.
std::string_view gguf_type_name(uint32_t type);

}  // namespace basalt::io
