// The forward pass shared by the Llama family (Llama, Qwen3): pre-norm blocks of GQA
// attention and a SwiGLU MLP, each added to the residual stream.
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/model.h"

namespace basalt {

namespace {

// Rotary inverse frequencies in f32, as transformers computes them (default, linear, llama3).
std::vector<float> rope_inv_freq(const RopeConfig& r) {
  const int64_t half = r.dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = float(2 * i) / float(r.dim);
    f[size_t(i)] = 1.0f / std::pow(r.theta, e);
  }
  if (r.scaling == "linear") {
    for (auto& v : f) v /= r.factor;
  } else if (r.scaling == "llama3") {
    const float old_ctx = float(r.original_max_position);
    const float low_wavelen = old_ctx / r.low_freq_factor;
    const float high_wavelen = old_ctx / r.high_freq_factor;
    for (auto& v : f) {
      const float wavelen = 2.0f * float(M_PI) / v;
      const float scaled = wavelen > low_wavelen ? v / r.factor : v;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        v = scaled;
      } else {
        const float smooth =
            (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        v = (1.0f - smooth) * scaled / r.factor + smooth * scaled;
      }
    }
  }
  if (!r.freq_factors.empty()) {
    if (int64_t(r.freq_factors.size()) != half)
      fail("[rope] rope_freqs has {} values, expected {}", r.freq_factors.size(), half);
    for (int64_t i = 0; i < half; ++i) f[size_t(i)] /= r.freq_factors[size_t(i)];
  }
  return f;
}

void grow(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

void add_bias(float* y, const std::vector<float>& b, int64_t T) {
  if (b.empty()) return;
  const int64_t n = int64_t(b.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[size_t(i)];
}

}  // namespace

Model::Model(ModelConfig cfg, ModelWeights w, io::Checkpoint ckpt)
    : cfg_(std::move(cfg)), w_(std::move(w)), ckpt_(std::move(ckpt)) {
  inv_freq_ = rope_inv_freq(cfg_.rope);
}

int64_t Model::param_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : ckpt_.tensors.all()) n += t.numel();
  return n;
}

std::string Model::weight_dtypes() const {
  std::map<std::string, int64_t> count;
  for (const auto& [name, t] : ckpt_.tensors.all())
    count[std::string(dtype_name(t.dtype))] += t.numel();
  std::string s;
  for (const auto& [dt, n] : count)
    s += fmt::format("{}{} ({} params)", s.empty() ? "" : ", ", dt, n);
  return s;
}

std::unique_ptr<KvCache> Model::new_kv_cache(int64_t capacity) const {
  return std::make_unique<KvCache>(cfg_.n_layers, capacity, cfg_.n_kv_heads, cfg_.head_dim);
}

void Model::check_backend(const Backend& be) const {
  auto check = [&](const WeightRef& w, const std::string& what) {
    if (!be.supports_weight(w.dtype))
      fail("[model] backend '{}' cannot run {} weights ({})", be.name(), dtype_name(w.dtype), what);
  };
  check(w_.embed, "embedding");
  check(w_.lm_head, "lm_head");
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerWeights& L = w_.layers[l];
    for (const WeightRef* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      check(*w, fmt::format("layer {}", l));
  }
}

void Model::rope_tables(int64_t pos0, int64_t T) {
  const int64_t half = cfg_.rope.dim / 2;
  grow(cos_, T * half);
  grow(sin_, T * half);
  for (int64_t t = 0; t < T; ++t) {
    const float p = float(pos0 + t);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq_[size_t(i)];
      cos_[size_t(t * half + i)] = std::cos(a);
      sin_[size_t(t * half + i)] = std::sin(a);
    }
  }
}

void Model::forward(Backend& be, std::span<const int32_t> tokens, KvCache& kv, float* logits,
                    bool all_logits) {
  const ModelConfig& c = cfg_;
  const int64_t T = int64_t(tokens.size());
  const int64_t E = c.hidden, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim, F = c.intermediate,
                V = c.vocab;
  const int64_t pos0 = kv.length();
  if (T == 0) return;
  if (pos0 + T > kv.capacity())
    fail("[model] sequence of {} tokens exceeds the KV cache capacity {}", pos0 + T, kv.capacity());
  for (int32_t id : tokens)
    if (id < 0 || id >= V) fail("[model] token id {} out of range [0, {})", id, V);

  grow(x_, T * E);   // residual stream [T, E]
  grow(xn_, T * E);  // normed input [T, E]
  grow(q_, T * H * D);
  grow(att_, T * H * D);
  grow(k_, T * Hkv * D);
  grow(v_, T * Hkv * D);
  grow(o_, T * E);
  grow(gate_, T * F);
  grow(up_, T * F);
  rope_tables(pos0, T);

  be.embedding(w_.embed, tokens.data(), T, x_.data());
  const float scale = 1.0f / std::sqrt(float(D));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    be.rmsnorm(x_.data(), L.attn_norm.data(), xn_.data(), T, E, c.rms_eps);
    be.matmul(xn_.data(), T, L.wq, q_.data());
    be.matmul(xn_.data(), T, L.wk, k_.data());
    be.matmul(xn_.data(), T, L.wv, v_.data());
    add_bias(q_.data(), L.bq, T);
    add_bias(k_.data(), L.bk, T);
    add_bias(v_.data(), L.bv, T);
    if (c.qk_norm) {  // per-head RMSNorm before RoPE (Qwen3)
      be.rmsnorm(q_.data(), L.q_norm.data(), q_.data(), T * H, D, c.rms_eps);
      be.rmsnorm(k_.data(), L.k_norm.data(), k_.data(), T * Hkv, D, c.rms_eps);
    }
    be.rope(q_.data(), T, H, D, c.rope.dim, cos_.data(), sin_.data(), c.rope.style);
    be.rope(k_.data(), T, Hkv, D, c.rope.dim, cos_.data(), sin_.data(), c.rope.style);
    // Write this pass's K/V rows into the cache before attention reads them.
    std::copy_n(k_.data(), T * Hkv * D, kv.k(l) + pos0 * Hkv * D);
    std::copy_n(v_.data(), T * Hkv * D, kv.v(l) + pos0 * Hkv * D);
    AttentionArgs a{q_.data(), kv.k(l), kv.v(l), att_.data(), T, H, Hkv, D, pos0, scale};
    be.attention(a);
    be.matmul(att_.data(), T, L.wo, o_.data());
    add_bias(o_.data(), L.bo, T);
    be.add(x_.data(), o_.data(), T * E);

    be.rmsnorm(x_.data(), L.ffn_norm.data(), xn_.data(), T, E, c.rms_eps);
    be.matmul(xn_.data(), T, L.w_gate, gate_.data());
    be.matmul(xn_.data(), T, L.w_up, up_.data());
    be.swiglu(gate_.data(), up_.data(), gate_.data(), T * F);
    be.matmul(gate_.data(), T, L.w_down, o_.data());
    be.add(x_.data(), o_.data(), T * E);
  }
  kv.set_length(pos0 + T);

  const int64_t first = all_logits ? 0 : T - 1;
  const int64_t rows = T - first;
  be.rmsnorm(x_.data() + first * E, w_.out_norm.data(), xn_.data(), rows, E, c.rms_eps);
  be.matmul(xn_.data(), rows, w_.lm_head, logits);
  (void)V;
}

}  // namespace basalt
