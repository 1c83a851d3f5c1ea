#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels_hwy.h"
#include "core/error.h"
#include "ops/ref/ref_ops.h"

namespace basalt::cpu {
namespace {

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}

  std::string name() const override {
    return fmt::format("cpu ({}, {} threads)", simd_target_name(), pool_.size());
  }
  bool supports_weight(DType t) const override { return ref::weight_dtype_supported(t); }

  // Split over output columns N in blocks of 16 (each thread owns whole dot products).
  void matmul(const void* xv, int64_t T, const WeightRef& w, float* y) override {
    const float* x = static_cast<const float*>(xv);
    if (!supports_weight(w.dtype)) fail("[cpu] matmul: weight dtype {}", dtype_name(w.dtype));
    const int64_t N = w.rows;
    const int64_t grain = 16;
    const int64_t blocks = (N + grain - 1) / grain;
    pool_.parallel_for(blocks, [&](int64_t b) {
      const int64_t n0 = b * grain, n1 = std::min(N, n0 + grain);
      matmul_rows(x, T, w, n0, n1, y, N);
    });
  }

  // One sum of squares per row, in index order: identical for every row count.
  void rmsnorm(const float* x, const float* w, void* yv, int64_t rows, int64_t n,
               float eps) override {
    float* y = static_cast<float*>(yv);
    pool_.parallel_ranges(rows, 1, [&](int64_t r0, int64_t r1) {
      ref::rmsnorm(x + r0 * n, w, y + r0 * n, r1 - r0, n, eps);
    });
  }

  void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
            const float* sin, RopeStyle style) override {
    ref::rope(x, T, heads, D, rot, cos, sin, style);
  }

  // One task per (query row, head); each visits its keys 0..p in order, so the result of a
  // query does not depend on which other rows (or sequences) share the pass.
  void attention(const AttentionArgs& a) override {
    const int64_t group = a.H / a.Hkv;
    pool_.parallel_for(a.T * a.H, [&](int64_t task) {
      const int64_t t = task / a.H, h = task % a.H, hk = h / group;
      const int64_t n_keys = a.pos[t] + 1;
      thread_local std::vector<float> s, row;
      if (s.size() < size_t(n_keys)) s.resize(size_t(n_keys));
      row.resize(size_t(a.D));
      const bool fp8 = a.kv == DType::F8_E4M3;  // as ref::attention: scales after the sums
      const float* q = a.q + (t * a.H + h) * a.D;
      float m = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        if (fp8)
          s[size_t(j)] = dot_f32(q, a.fp8_decode(a.k, t, j, hk, row.data()), a.D) *
                         a.fp8_scale(a.k, t, j, hk) * a.scale;
        else
          s[size_t(j)] = dot_f32(q, a.key(t, j) + hk * a.D, a.D) * a.scale;
        m = std::max(m, s[size_t(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n_keys; ++j) {
        s[size_t(j)] = std::exp(s[size_t(j)] - m);
        sum += s[size_t(j)];
      }
      float* o = static_cast<float*>(a.out) + (t * a.H + h) * a.D;
      std::fill(o, o + a.D, 0.0f);
      for (int64_t j = 0; j < n_keys; ++j) {
        if (fp8)
          axpy_f32(o, s[size_t(j)] * a.fp8_scale(a.v, t, j, hk),
                   a.fp8_decode(a.v, t, j, hk, row.data()), a.D);
        else
          axpy_f32(o, s[size_t(j)], a.value(t, j) + hk * a.D, a.D);
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < a.D; ++i) o[i] *= inv;
    });
  }

  void swiglu(const float* gate, const float* up, void* outv, int64_t n) override {
    float* out = static_cast<float*>(outv);
    pool_.parallel_ranges(n, 256, [&](int64_t i0, int64_t i1) {
      ref::swiglu(gate + i0, up + i0, out + i0, i1 - i0);
    });
  }

  void add(float* y, const float* x, int64_t n) override { ref::add(y, x, n); }

 private:
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace basalt::cpu
