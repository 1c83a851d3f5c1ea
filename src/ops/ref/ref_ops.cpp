#include "ops/ref/ref_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/ref/qdot.h"
#include "ops/ref/quants.h"
#include "ops/ref/scaled.h"

namespace basalt::ref {

bool weight_dtype_supported(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::NVFP4:
    case DType::F8_E4M3:
      return true;
    default:
      return false;
  }
}

void weight_row_f32(const WeightRef& w, int64_t n, float* out) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t K = w.cols;
  switch (w.dtype) {
    case DType::F32:
      std::memcpy(out, base + n * K * 4, size_t(K) * 4);
      return;
    case DType::F16: {
      const auto* p = reinterpret_cast<const uint16_t*>(base) + n * K;
      for (int64_t k = 0; k < K; ++k) out[k] = f16_to_f32(p[k]);
      return;
    }
    case DType::BF16: {
      const auto* p = reinterpret_cast<const uint16_t*>(base) + n * K;
      for (int64_t k = 0; k < K; ++k) out[k] = bf16_to_f32(p[k]);
      return;
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {
      const int64_t blocks = K / dtype_block_elems(w.dtype);
      dequant_blocks(w.dtype, base + n * blocks * dtype_block_bytes(w.dtype), blocks, out);
      return;
    }
    case DType::NVFP4:
    case DType::F8_E4M3:
      scaled_dequant_row(w, n, out);
      return;
    default:
      fail("[ops] matmul weight dtype {} not supported", dtype_name(w.dtype));
  }
}

void matmul(const float* x, int64_t T, const WeightRef& w, float* y) {
  const int64_t N = w.rows, K = w.cols;
  std::vector<float> row(static_cast<size_t>(K));
  const bool scaled = is_scaled(w);  // factor(n) · Σ inner · x (ops/ref/scaled.h)
  for (int64_t n = 0; n < N; ++n) {
    if (scaled)
      scaled_inner_row(w, n, row.data());
    else
      weight_row_f32(w, n, row.data());
    const float f = scaled ? scaled_factor(w, n) : 1.0f;
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += xt[k] * row[k];
      y[t * N + n] = scaled ? f * acc : acc;
    }
  }
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] * inv) * w[i];
  }
}

void embedding(const WeightRef& table, const int32_t* ids, int64_t T, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= table.rows)
      fail("[ops] token id {} out of range [0, {})", ids[t], table.rows);
    weight_row_f32(table, ids[t], out + t * table.cols);
  }
}

void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
          const float* sin, RopeStyle style) {
  const int64_t half = rot / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = style == RopeStyle::NeoX ? i : 2 * i;
        const int64_t b = style == RopeStyle::NeoX ? i + half : 2 * i + 1;
        const float c = cos[t * half + i], s = sin[t * half + i];
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x1 * c + x0 * s;
      }
    }
  }
}

// F8_E4M3 caches: a score is (Σ q·e4m3(k)) · s_k · scale and a value row is weighted by
// e_j · s_v, so the codes enter the sums exactly and each scale costs one multiply. BF16
// caches: the stored values, widened exactly, in the f32 arithmetic.
void attention(const AttentionArgs& a) {
  const int64_t group = a.H / a.Hkv;
  const bool fp8 = a.kv == DType::F8_E4M3;
  std::vector<float> row(static_cast<size_t>(a.D));
  // Head hk of key / value j of row t (base a.k or a.v) as f32 values.
  auto row_of = [&](const void* base, int64_t t, int64_t j, int64_t hk) -> const float* {
    if (fp8) return a.fp8_decode(base, t, j, hk, row.data());
    if (a.kv == DType::BF16) {
      const uint16_t* p = static_cast<const uint16_t*>(a.kv_row(base, t, j)) + hk * a.D;
      for (int64_t i = 0; i < a.D; ++i) row[size_t(i)] = bf16_to_f32(p[i]);
      return row.data();
    }
    return static_cast<const float*>(a.kv_row(base, t, j)) + hk * a.D;
  };
  for (int64_t t = 0; t < a.T; ++t) {
    const int64_t n_keys = a.keys(t);
    std::vector<float> s(static_cast<size_t>(n_keys));
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t hk = h / group;
      const float* q = a.q + (t * a.H + h) * a.D;
      float m = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* k = row_of(a.k, t, j, hk);
        float d = 0.0f;
        for (int64_t i = 0; i < a.D; ++i) d += q[i] * k[i];
        if (fp8) d *= a.fp8_scale(a.k, t, j, hk);
        s[size_t(j)] = d * a.scale;
        m = std::max(m, s[size_t(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n_keys; ++j) {
        s[size_t(j)] = std::exp(s[size_t(j)] - m);
        sum += s[size_t(j)];
      }
      float* o = static_cast<float*>(a.out) + (t * a.H + h) * a.D;
      for (int64_t i = 0; i < a.D; ++i) o[i] = 0.0f;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* v = row_of(a.v, t, j, hk);
        const float w = fp8 ? s[size_t(j)] * a.fp8_scale(a.v, t, j, hk) : s[size_t(j)];
        for (int64_t i = 0; i < a.D; ++i) o[i] += w * v[i];
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < a.D; ++i) o[i] *= inv;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

namespace {
float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}  // torch's threshold
}  // namespace

void moe_route(const float* logits, int64_t n_experts, int64_t top_k, bool norm, int32_t* ids,
               float* weights) {
  float m = -INFINITY;
  for (int64_t e = 0; e < n_experts; ++e) m = std::max(m, logits[e]);
  std::vector<float> p(static_cast<size_t>(n_experts));
  float sum = 0.0f;
  for (int64_t e = 0; e < n_experts; ++e) sum += (p[size_t(e)] = std::exp(logits[e] - m));
  for (auto& v : p) v /= sum;
  std::vector<bool> taken(size_t(n_experts), false);
  float top = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    int64_t best = -1;
    for (int64_t e = 0; e < n_experts; ++e)
      if (!taken[size_t(e)] && (best < 0 || p[size_t(e)] > p[size_t(best)])) best = e;
    taken[size_t(best)] = true;
    ids[k] = int32_t(best);
    weights[k] = p[size_t(best)];
    top += weights[k];
  }
  if (norm)
    for (int64_t k = 0; k < top_k; ++k) weights[k] /= top;
}

void moe(const MoeArgs& m) {
  std::vector<int32_t> ids(size_t(m.top_k));
  std::vector<float> w(size_t(m.top_k)), g(size_t(m.F)), u(size_t(m.F)), a(size_t(m.F)),
      y(size_t(m.E));
  const float* x = static_cast<const float*>(m.x);
  for (int64_t t = 0; t < m.T; ++t) {
    moe_route(m.router + t * m.n_experts, m.n_experts, m.top_k, m.norm_topk, ids.data(), w.data());
    float* out = m.out + t * m.E;
    std::fill(out, out + m.E, 0.0f);
    for (int64_t k = 0; k < m.top_k; ++k) {
      const int32_t e = ids[size_t(k)];
      matmul(x + t * m.E, 1, m.gate[e], g.data());
      matmul(x + t * m.E, 1, m.up[e], u.data());
      swiglu(g.data(), u.data(), a.data(), m.F);
      matmul(a.data(), 1, m.down[e], y.data());
      for (int64_t i = 0; i < m.E; ++i) out[i] += w[size_t(k)] * y[size_t(i)];
    }
  }
}

void gdn(const GdnArgs& g, const int32_t* slots, const int64_t* pos, const int32_t* snaps) {
  const int64_t C = g.channels(), Km1 = g.K - 1, KD = g.Hk * g.Dk, group = g.Hv / g.Hk;
  std::vector<float> u(static_cast<size_t>(C));
  for (int64_t t = 0; t < g.T; ++t) {
    const int64_t s = slots[t];
    float* cs = g.conv_state + s * C * Km1;
    float* S0 = g.rec_state + s * g.Hv * g.Dk * g.Dv;
    if (pos[t] == 0) {
      std::fill(cs, cs + C * Km1, 0.0f);
      std::fill(S0, S0 + g.Hv * g.Dk * g.Dv, 0.0f);
    }
    const float* x = g.qkv + t * C;
    for (int64_t c = 0; c < C; ++c) {
      const float* w = g.conv_w + c * g.K;
      float* st = cs + c * Km1;
      float acc = 0.0f;
      for (int64_t j = 0; j < Km1; ++j) acc += w[j] * st[j];
      acc += w[Km1] * x[c];
      for (int64_t j = 0; j + 1 < Km1; ++j) st[j] = st[j + 1];
      if (Km1 > 0) st[Km1 - 1] = x[c];
      u[size_t(c)] = silu(acc);
    }
    auto l2 = [](float* v, int64_t n, float extra) {
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] * inv / extra;
    };
    const float qscale = std::sqrt(float(g.Dk));
    for (int64_t h = 0; h < g.Hk; ++h) {
      l2(u.data() + h * g.Dk, g.Dk, qscale);
      l2(u.data() + KD + h * g.Dk, g.Dk, 1.0f);
    }
    for (int64_t h = 0; h < g.Hv; ++h) {
      const float* q = u.data() + (h / group) * g.Dk;
      const float* k = u.data() + KD + (h / group) * g.Dk;
      const float* v = u.data() + 2 * KD + h * g.Dv;
      const float beta = sigmoid(g.b[t * g.Hv + h]);
      const float decay =
          std::exp(-std::exp(g.A_log[h]) * softplus(g.a[t * g.Hv + h] + g.dt_bias[h]));
      float* S = S0 + h * g.Dk * g.Dv;  // [Dk, Dv]
      for (int64_t i = 0; i < g.Dk * g.Dv; ++i) S[i] *= decay;
      float* o = g.out + (t * g.Hv + h) * g.Dv;
      for (int64_t j = 0; j < g.Dv; ++j) {
        float mem = 0.0f;
        for (int64_t i = 0; i < g.Dk; ++i) mem += S[i * g.Dv + j] * k[i];
        const float delta = (v[j] - mem) * beta;
        for (int64_t i = 0; i < g.Dk; ++i) S[i * g.Dv + j] += k[i] * delta;
        float acc = 0.0f;
        for (int64_t i = 0; i < g.Dk; ++i) acc += S[i * g.Dv + j] * q[i];
        o[j] = acc;
      }
    }
    if (snaps && snaps[t] >= 0) {  // the state after this row, into its snapshot slot
      const int64_t sn = snaps[t], R = g.Hv * g.Dk * g.Dv;
      std::copy_n(cs, C * Km1, g.conv_state + sn * C * Km1);
      std::copy_n(S0, R, g.rec_state + sn * R);
    }
  }
}

void gated_rmsnorm(const float* x, const float* z, const float* w, float* y, int64_t rows,
                   int64_t n, float eps) {
  rmsnorm(x, w, y, rows, n, eps);
  for (int64_t i = 0; i < rows * n; ++i) y[i] *= silu(z[i]);
}

void sigmoid_mul(float* y, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= sigmoid(gate[i]);
}

void gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n) {
  for (int64_t t = 0; t < T; ++t) {
    const float f = sigmoid(g[t]);
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += f * s[t * n + i];
  }
}

namespace {
class RefBackend final : public HostBackend {
 public:
  explicit RefBackend(bool q8_acts) : q8_acts_(q8_acts) {}
  std::string name() const override { return q8_acts_ ? "ref (q8 activations)" : "ref"; }
  bool supports_weight(DType t) const override { return weight_dtype_supported(t); }
  void matmul(const void* x, int64_t T, const WeightRef& w, float* y) override {
    if (q8_acts_ && q8_acts_supported(w.dtype))
      ref::matmul_q8(static_cast<const float*>(x), T, w, y);
    else
      ref::matmul(static_cast<const float*>(x), T, w, y);
  }
  void rmsnorm(const float* x, const float* w, void* y, int64_t rows, int64_t n,
               float eps) override {
    ref::rmsnorm(x, w, static_cast<float*>(y), rows, n, eps);
  }
  void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* c,
            const float* s, RopeStyle st) override {
    ref::rope(x, T, heads, D, rot, c, s, st);
  }
  void attention(const AttentionArgs& a) override { ref::attention(a); }
  void swiglu(const float* g, const float* u, void* o, int64_t n) override {
    ref::swiglu(g, u, static_cast<float*>(o), n);
  }
  void add(float* y, const float* x, int64_t n) override { ref::add(y, x, n); }
  void moe(const MoeArgs& m) override {
    if (q8_acts_)
      HostBackend::moe(m);  // experts through matmul() above
    else
      ref::moe(m);
  }

 private:
  bool q8_acts_;
};
}  // namespace

std::unique_ptr<Backend> make_ref_backend(bool q8_acts) {
  return std::make_unique<RefBackend>(q8_acts);
}

}  // namespace basalt::ref
