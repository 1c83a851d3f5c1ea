// KvCache: one sequence's keys and values, f32, contiguous per layer:
// k[l], v[l] are [capacity, Hkv, D]. (The paged block pool arrives with the server issue.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace basalt {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }  // positions filled
  void set_length(int64_t n);                 // truncate (rollback) or mark filled
  void clear() { length_ = 0; }
  int64_t row_floats() const { return hkv_ * d_; }

  float* k(int64_t layer) { return k_[size_t(layer)].data(); }
  float* v(int64_t layer) { return v_[size_t(layer)].data(); }
  size_t bytes() const;

 private:
  int64_t capacity_, hkv_, d_, length_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace basalt
