#include "kv/kv_cache.h"

#include "core/error.h"

namespace basalt {

KvCache::KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim)
    : capacity_(capacity), hkv_(n_kv_heads), d_(head_dim) {
  if (capacity <= 0) fail("[kv] capacity must be positive, got {}", capacity);
  k_.resize(size_t(n_layers));
  v_.resize(size_t(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    k_[size_t(l)].assign(size_t(capacity * hkv_ * d_), 0.0f);
    v_[size_t(l)].assign(size_t(capacity * hkv_ * d_), 0.0f);
  }
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_) fail("[kv] length {} outside [0, {}]", n, capacity_);
  length_ = n;
}

size_t KvCache::bytes() const {
  return 2 * k_.size() * size_t(capacity_ * hkv_ * d_) * sizeof(float);
}

}  // namespace basalt
