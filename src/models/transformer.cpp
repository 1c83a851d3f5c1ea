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

namespace {
int64_t weight_bytes(const WeightRef& w) { return int64_t(dtype_bytes(w.dtype, w.rows * w.cols)); }
}  // namespace

int64_t Model::decode_bytes(int64_t context) const {
  const ModelConfig& c = cfg_;
  int64_t b = weight_bytes(w_.lm_head) + weight_bytes(w_.embed) / c.vocab;
  for (const LayerWeights& L : w_.layers)
    for (const WeightRef* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      b += weight_bytes(*w);
  return b + 2 * c.n_layers * context * c.n_kv_heads * c.head_dim * int64_t(sizeof(float));
}

double Model::token_flops(int64_t context) const {
  const ModelConfig& c = cfg_;
  double f = 2.0 * double(w_.lm_head.rows * w_.lm_head.cols);
  for (const LayerWeights& L : w_.layers)
    for (const WeightRef* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      f += 2.0 * double(w->rows * w->cols);
  return f + 4.0 * double(c.n_layers * context * c.n_heads * c.head_dim);
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

std::unique_ptr<KvPool> Model::new_kv_pool(int64_t tokens, int64_t block_size) const {
  return std::make_unique<KvPool>(cfg_.n_layers, (tokens + block_size - 1) / block_size, block_size,
                                  cfg_.n_kv_heads, cfg_.head_dim);
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

void Model::rope_tables(const std::vector<int64_t>& pos) {
  const int64_t half = cfg_.rope.dim / 2, T = int64_t(pos.size());
  grow(cos_, T * half);
  grow(sin_, T * half);
  for (int64_t t = 0; t < T; ++t) {
    const float p = float(pos[size_t(t)]);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq_[size_t(i)];
      cos_[size_t(t * half + i)] = std::cos(a);
      sin_[size_t(t * half + i)] = std::sin(a);
    }
  }
}

void Model::forward(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
                    float* logits, bool all_logits) {
  if (!pool.reserve(seq, int64_t(tokens.size())))
    fail("[model] the KV cache is full: {} + {} positions do not fit", seq.length, tokens.size());
  const BatchItem item{&seq, tokens, all_logits};
  forward(be, pool, std::span(&item, 1), logits);
}

void Model::forward(Backend& be, KvPool& pool, std::span<const BatchItem> batch, float* logits) {
  const ModelConfig& c = cfg_;
  const int64_t E = c.hidden, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim, F = c.intermediate,
                V = c.vocab;
  // Rows of the pass: each item's tokens in order, with their positions and block tables.
  ids_.clear();
  pos_.clear();
  tables_.clear();
  for (const BatchItem& it : batch) {
    const int64_t n = int64_t(it.tokens.size());
    const int64_t cap = int64_t(it.seq->blocks.size()) * pool.block_size();
    if (it.seq->length + n > cap)
      fail("[model] sequence needs {} positions, {} reserved", it.seq->length + n, cap);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = it.tokens[size_t(i)];
      if (id < 0 || id >= V) fail("[model] token id {} out of range [0, {})", id, V);
      ids_.push_back(id);
      pos_.push_back(it.seq->length + i);
      tables_.push_back(it.seq->blocks.data());
    }
  }
  const int64_t T = int64_t(ids_.size());
  if (T == 0) return;

  grow(x_, T * E);   // residual stream [T, E]
  grow(xn_, T * E);  // normed input [T, E]
  grow(q_, T * H * D);
  grow(att_, T * H * D);
  grow(k_, T * Hkv * D);
  grow(v_, T * Hkv * D);
  grow(o_, T * E);
  grow(gate_, T * F);
  grow(up_, T * F);
  rope_tables(pos_);

  be.embedding(w_.embed, ids_.data(), T, x_.data());
  const float scale = 1.0f / std::sqrt(float(D));
  const int64_t row = Hkv * D;
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
    int64_t t = 0;
    for (const BatchItem& it : batch)
      for (size_t i = 0; i < it.tokens.size(); ++i, ++t) {
        const int64_t off = pool.offset(*it.seq, pos_[size_t(t)]);
        std::copy_n(k_.data() + t * row, row, pool.k(l) + off);
        std::copy_n(v_.data() + t * row, row, pool.v(l) + off);
      }
    AttentionArgs a;
    a.q = q_.data();
    a.out = att_.data();
    a.k = pool.k(l);
    a.v = pool.v(l);
    a.T = T, a.H = H, a.Hkv = Hkv, a.D = D, a.block_size = pool.block_size();
    a.block_tables = tables_.data();
    a.pos = pos_.data();
    a.scale = scale;
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
  for (const BatchItem& it : batch) pool.commit(*it.seq, it.tokens);

  // Final norm and LM head on the rows that need logits only.
  int64_t rows = 0, first = 0;
  for (const BatchItem& it : batch) {
    const int64_t n = int64_t(it.tokens.size());
    const int64_t from = it.all_logits ? 0 : n - 1;
    for (int64_t i = from; i < n; ++i, ++rows)
      be.rmsnorm(x_.data() + (first + i) * E, w_.out_norm.data(), xn_.data() + rows * E, 1, E,
                 c.rms_eps);
    first += n;
  }
  be.matmul(xn_.data(), rows, w_.lm_head, logits);
}

}  // namespace basalt
