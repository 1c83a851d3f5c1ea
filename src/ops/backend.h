// The backend contract: the ops a decoder-only transformer runs, on raw pointers.
// Shapes use the glossary: T tokens in a pass, H query heads, Hkv KV heads, D head dim,
// E hidden size, F MLP size, V vocabulary, P KV positions, K/N a matmul's in/out sizes.
//
// Exactness (EXACTNESS.md): every implementation computes each output element with one
// reduction order that depends only on the weight shape, never on T or the thread count.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace basalt {

// A weight matrix [N, K] row-major (PyTorch's nn.Linear layout), in host memory for the
// CPU backends. dtype: F32, F16, BF16, or a GGUF block type (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K:
// blocks along K).
struct WeightRef {
  DType dtype = DType::F32;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  const void* data = nullptr;
};

enum class RopeStyle : uint8_t {
  NeoX,        // HF rotate_half: pairs (i, i + rot/2)
  Interleaved  // GPT-J / llama.cpp "norm": pairs (2i, 2i + 1)
};

// Causal attention of T query rows over a paged KV cache. Row t belongs to a sequence whose
// block table is block_tables[t]; it sits at position pos[t] and attends to keys 0..pos[t]
// (its own key included: K/V rows of the pass are written to the cache first).
struct AttentionArgs {
  const float* q = nullptr;  // [T, H, D]
  float* out = nullptr;      // [T, H, D]
  const float* k = nullptr;  // this layer's key blocks [n_blocks, block_size, Hkv, D]
  const float* v = nullptr;  // this layer's value blocks, same layout
  int64_t T = 0, H = 0, Hkv = 0, D = 0, block_size = 0;
  const int32_t* const* block_tables = nullptr;  // [T] → the row's block ids
  const int64_t* pos = nullptr;                  // [T]
  float scale = 1.0f;

  // Where key/value j of row t starts.
  const float* key(int64_t t, int64_t j) const { return k + kv_offset(t, j); }
  const float* value(int64_t t, int64_t j) const { return v + kv_offset(t, j); }
  int64_t kv_offset(int64_t t, int64_t j) const {
    return (int64_t(block_tables[t][j / block_size]) * block_size + j % block_size) * Hkv * D;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool supports_weight(DType t) const = 0;

  // y[T, N] = x[T, K] · W[N, K]ᵀ
  virtual void matmul(const float* x, int64_t T, const WeightRef& w, float* y) = 0;
  // y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * w     (rows × n)
  virtual void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                       float eps) = 0;
  // out[T, E] = table[ids[t], :]
  virtual void embedding(const WeightRef& table, const int32_t* ids, int64_t T, float* out) = 0;
  // x[T, heads, D] rotated in place over its first `rot` dims; cos/sin [T, rot/2].
  virtual void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
                    const float* sin, RopeStyle style) = 0;
  // Causal GQA attention of T query rows over the paged KV cache.
  virtual void attention(const AttentionArgs& a) = 0;
  // out[i] = silu(gate[i]) * up[i]
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
};

}  // namespace basalt
