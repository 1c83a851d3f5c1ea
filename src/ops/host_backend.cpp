// HostBackend: the host-memory half of the CPU backends (ops/backend.h).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/ref/ref_ops.h"

namespace basalt {

uint64_t Backend::next_id() {
  static std::atomic<uint64_t> n{1};
  return n++;
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
                           int64_t row) {
  const int64_t bs = rows_.block_size;
  for (int64_t t = 0; t < rows_.T; ++t) {
    const int64_t p = rows_.pos[t];
    const int64_t off = (int64_t(rows_.tables[t][p / bs]) * bs + p % bs) * row;
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

}  // namespace basalt
