// HostBackend: the host-memory half of the CPU backends (ops/backend.h).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/ref/ref_ops.h"
#include "ops/ref/scaled.h"

namespace basalt {

uint64_t Backend::next_id() {
  static std::atomic<uint64_t> n{1};
  return n++;
}

// Hybrid and MoE ops: absent unless a backend provides them (supports_hybrid/supports_moe are
// checked at load, so these are reached only by a caller that skipped the check).
void Backend::sigmoid_mul(void*, const float*, int64_t) {
  fail("[{}] sigmoid_mul is not implemented", name());
}
void Backend::gated_add(float*, const float*, const float*, int64_t, int64_t) {
  fail("[{}] gated_add is not implemented", name());
}
void Backend::moe(const MoeArgs&) {
  fail("[{}] moe is not implemented", name());
}
void Backend::gdn(const GdnArgs&) {
  fail("[{}] gdn is not implemented", name());
}
void Backend::gated_rmsnorm(const float*, const float*, const float*, void*, int64_t, int64_t,
                            float) {
  fail("[{}] gated_rmsnorm is not implemented", name());
}

void Backend::set_kv_dtype(DType t) {
  if (t != kv_dtype())
    fail("[{}] cannot keep the KV cache in {} (it keeps {})", name(), dtype_name(t),
         dtype_name(kv_dtype()));
}

void HostBackend::set_kv_dtype(DType t) {
  if (t != DType::F32 && t != DType::BF16 && t != DType::F8_E4M3)
    fail("[{}] cannot keep the KV cache in {} (f32, bf16 or fp8)", name(), dtype_name(t));
  kv_ = t;
}

void Backend::copy(void* dst, const void* src, size_t bytes) {
  std::vector<uint8_t> tmp(bytes);
  download(tmp.data(), src, bytes);
  upload(dst, tmp.data(), bytes);
}

void Backend::copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                        size_t bytes, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    copy(static_cast<char*>(dst) + size_t(r) * dst_stride,
         static_cast<const char*>(src) + size_t(r) * src_stride, bytes);
}

void Backend::act_to_f32(const void* x, float* y, int64_t n) {
  const DType t = act_dtype();
  std::vector<uint8_t> in(dtype_bytes(t, size_t(n)));
  download(in.data(), x, in.size());
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(dtype_read_f64(t, in.data(), i));
  upload(y, out.data(), out.size() * sizeof(float));
}

void Backend::f32_to_act(const float* x, void* y, int64_t n) {
  const DType t = act_dtype();
  if (t == DType::F32) return copy(y, x, size_t(n) * sizeof(float));
  if (t != DType::BF16) fail("[{}] f32_to_act: no conversion to {}", name(), dtype_name(t));
  std::vector<float> in(static_cast<size_t>(n));
  download(in.data(), x, in.size() * sizeof(float));
  std::vector<uint16_t> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_bf16(in[i]);
  upload(y, out.data(), out.size() * sizeof(uint16_t));
}

HostBackend::~HostBackend() {
  for (auto& [p, n] : sizes_) std::free(p);
}

void* HostBackend::alloc(size_t bytes) {
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, n);
  if (!p) fail("[{}] out of memory allocating {} bytes", name(), bytes);
  std::memset(p, 0, n);
  sizes_[p] = n;
  live_ += n;
  peak_ = std::max(peak_, live_);
  return p;
}

void HostBackend::dealloc(void* p) {
  if (!p) return;
  auto it = sizes_.find(p);
  if (it == sizes_.end()) fail("[{}] dealloc of memory it did not allocate", name());
  live_ -= it->second;
  sizes_.erase(it);
  std::free(p);
}

void HostBackend::upload(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void HostBackend::download(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void HostBackend::copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}

void HostBackend::add_rmsnorm(float* x, const float* delta, const float* w, void* y, int64_t rows,
                              int64_t n, float eps) {
  add(x, delta, rows * n);
  rmsnorm(x, w, y, rows, n, eps);
}

void HostBackend::head_rmsnorm(float* x, const float* w, int64_t rows, int64_t n, float eps) {
  rmsnorm(x, w, x, rows, n, eps);
}

void HostBackend::embedding(const WeightRef& table, float* out) {
  ref::embedding(table, rows_.ids, rows_.T, out);
}

void HostBackend::rope_angles(const float* inv_freq, int64_t half, float* cos, float* sin) {
  for (int64_t t = 0; t < rows_.T; ++t) {
    const float p = float(rows_.pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq[i];
      cos[t * half + i] = std::cos(a);
      sin[t * half + i] = std::sin(a);
    }
  }
}

void HostBackend::add_bias(float* y, const float* b, int64_t T, int64_t n) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[i];
}

void HostBackend::kv_write(const float* k, const float* v, void* k_cache, void* v_cache,
                           int64_t Hkv, int64_t D) {
  const int64_t bs = rows_.block_size, row = Hkv * D;
  for (int64_t t = 0; t < rows_.T; ++t) {
    const int64_t p = rows_.pos[t];
    if (kv_ == DType::F8_E4M3) {  // codes and a scale per head (AttentionArgs)
      const int64_t blk = int64_t(rows_.tables[t][p / bs]) * bs * Hkv * (D + 4);
      for (auto [src, dst] : {std::pair{k, k_cache}, std::pair{v, v_cache}}) {
        auto* base = static_cast<uint8_t*>(dst) + blk;
        auto* scales = reinterpret_cast<float*>(base + bs * Hkv * D);
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t r = (p % bs) * Hkv + h;
          scales[r] = ref::kv_fp8_encode(src + t * row + h * D, D, base + r * D);
        }
      }
      continue;
    }
    const int64_t off = (int64_t(rows_.tables[t][p / bs]) * bs + p % bs) * row;
    if (kv_ == DType::BF16) {  // rounded to nearest even (f32_to_bf16)
      for (auto [src, dst] : {std::pair{k, k_cache}, std::pair{v, v_cache}}) {
        uint16_t* out = static_cast<uint16_t*>(dst) + off;
        for (int64_t i = 0; i < row; ++i) out[i] = f32_to_bf16(src[t * row + i]);
      }
      continue;
    }
    std::memcpy(static_cast<float*>(k_cache) + off, k + t * row, size_t(row) * sizeof(float));
    std::memcpy(static_cast<float*>(v_cache) + off, v + t * row, size_t(row) * sizeof(float));
  }
}

void HostBackend::argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (row[i] > row[best]) best = i;
    out[r] = int32_t(best);
  }
}

void HostBackend::sigmoid_mul(void* y, const float* gate, int64_t n) {
  ref::sigmoid_mul(static_cast<float*>(y), gate, n);
}

void HostBackend::gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n) {
  ref::gated_add(y, s, g, T, n);
}

void HostBackend::gdn(const GdnArgs& g) {
  if (!rows_.slots) fail("[{}] gdn: the pass has no state slots", name());
  ref::gdn(g, rows_.slots, rows_.pos, rows_.snaps);
}

void HostBackend::gated_rmsnorm(const float* x, const float* z, const float* w, void* y,
                                int64_t rows, int64_t n, float eps) {
  ref::gated_rmsnorm(x, z, w, static_cast<float*>(y), rows, n, eps);
}

void HostBackend::moe(const MoeArgs& m) {
  const int64_t K = m.top_k;
  std::vector<int32_t> ids(size_t(m.T * K));
  std::vector<float> p(size_t(m.T * K));
  for (int64_t t = 0; t < m.T; ++t)
    ref::moe_route(m.router + t * m.n_experts, m.n_experts, K, m.norm_topk, ids.data() + t * K,
                   p.data() + t * K);
  // Each expert's rows gathered into one matmul; results kept per (row, rank).
  std::vector<float> y(size_t(m.T * K * m.E));
  std::vector<int64_t> members;
  std::vector<float> xg, g, u, a, yg;
  const float* x = static_cast<const float*>(m.x);
  for (int64_t e = 0; e < m.n_experts; ++e) {
    members.clear();
    for (int64_t i = 0; i < m.T * K; ++i)
      if (ids[size_t(i)] == e) members.push_back(i);
    const int64_t n = int64_t(members.size());
    if (n == 0) continue;
    xg.resize(size_t(n * m.E)), g.resize(size_t(n * m.F)), u.resize(size_t(n * m.F));
    a.resize(size_t(n * m.F)), yg.resize(size_t(n * m.E));
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xg.data() + r * m.E, x + (members[size_t(r)] / K) * m.E,
                  size_t(m.E) * sizeof(float));
    matmul(xg.data(), n, m.gate[e], g.data());
    matmul(xg.data(), n, m.up[e], u.data());
    swiglu(g.data(), u.data(), a.data(), n * m.F);
    matmul(a.data(), n, m.down[e], yg.data());
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(y.data() + members[size_t(r)] * m.E, yg.data() + r * m.E,
                  size_t(m.E) * sizeof(float));
  }
  for (int64_t t = 0; t < m.T; ++t) {
    float* out = m.out + t * m.E;
    std::fill(out, out + m.E, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float w = p[size_t(t * K + k)];
      const float* yk = y.data() + (t * K + k) * m.E;
      for (int64_t i = 0; i < m.E; ++i) out[i] += w * yk[i];
    }
  }
}

}  // namespace basalt
