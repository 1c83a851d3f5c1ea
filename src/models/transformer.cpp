// The forward pass shared by the Llama family (Llama, Qwen3): pre-norm blocks of GQA
// attention and a SwiGLU MLP, each added to the residual stream.
#include <cmath>
#include <map>

#include "core/error.h"
#include "memory/planner.h"
#include "models/model.h"
#include "ops/ref/scaled.h"

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

int64_t ModelConfig::n_attention_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += is_linear(l) ? 0 : 1;
  return n;
}

namespace {
int64_t weight_bytes(const WeightRef& w) {  // with the scales of the scaled formats
  return int64_t(dtype_bytes(w.dtype, w.rows * w.cols) + ref::scaled_scales_bytes(w));
}

// The matrices one token reads in a layer: all of them except the routed experts, of which
// `top_k` (a decode step reads that many distinct experts; counted as the average size).
template <typename Fn>
void for_each_read_matrix(const LayerWeights& L, int64_t top_k, Fn&& fn) {
  for (const WeightRef* w : {&L.wq, &L.wq_gate, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down,
                             &L.gdn_qkv, &L.gdn_z, &L.gdn_b, &L.gdn_a, &L.gdn_out, &L.router,
                             &L.shared_gate, &L.shared_up, &L.shared_down, &L.shared_router})
    if (w->data) fn(*w, 1.0);
  const double share = L.ex_gate.empty() ? 0.0 : double(top_k) / double(L.ex_gate.size());
  for (const auto* v : {&L.ex_gate, &L.ex_up, &L.ex_down})
    for (const WeightRef& w : *v) fn(w, share);
}
}  // namespace

int64_t Model::decode_bytes(int64_t context, size_t kv_row_bytes) const {
  const ModelConfig& c = cfg_;
  double b = double(weight_bytes(w_.lm_head) + weight_bytes(w_.embed) / c.vocab);
  for (const LayerWeights& L : w_.layers)
    for_each_read_matrix(L, c.moe.top_k,
                         [&](const WeightRef& w, double f) { b += f * double(weight_bytes(w)); });
  // Recurrent state (hybrid layers) is read and written once per token, in f32.
  const int64_t state =
      (c.n_layers - c.n_attention_layers()) *
      (c.gdn.channels() * (c.gdn.conv_kernel - 1) + c.gdn.v_heads * c.gdn.k_dim * c.gdn.v_dim) * 4;
  return int64_t(b) + 2 * state +
         2 * c.n_attention_layers() * context * c.n_kv_heads *
             int64_t(kv_row_bytes ? kv_row_bytes : size_t(c.head_dim) * 4);
}

double Model::token_flops(int64_t context) const {
  const ModelConfig& c = cfg_;
  double f = 2.0 * double(w_.lm_head.rows * w_.lm_head.cols);
  for (const LayerWeights& L : w_.layers)
    for_each_read_matrix(L, c.moe.top_k, [&](const WeightRef& w, double share) {
      f += share * 2.0 * double(w.rows * w.cols);
    });
  const double gdn = 6.0 * double(c.gdn.v_heads * c.gdn.k_dim * c.gdn.v_dim);
  return f + double(c.n_layers - c.n_attention_layers()) * gdn +
         4.0 * double(c.n_attention_layers() * context * c.n_heads * c.head_dim);
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

int64_t Model::kv_block_size(const Backend& be, int64_t block_size) {
  const int64_t m = be.kv_block_multiple();
  return (block_size + m - 1) / m * m;
}

std::unique_ptr<KvPool> Model::new_kv_pool(Backend& be, int64_t tokens, int64_t block_size,
                                           int64_t max_seqs, int64_t snapshots) const {
  block_size = kv_block_size(be, block_size);
  KvStorage st;
  st.alloc = [&be](size_t n) { return be.alloc(n); };
  st.free = [&be](void* p) { be.dealloc(p); };
  st.row_bytes = be.kv_row_bytes(cfg_.head_dim);
  KvStateSpec state;
  const GdnConfig& g = cfg_.gdn;
  if (cfg_.n_attention_layers() < cfg_.n_layers) {
    state.slots = std::max<int64_t>(max_seqs, 1);
    state.snapshots = snapshots >= 0 ? snapshots : 2 * state.slots;
    state.layers = cfg_.n_layers - cfg_.n_attention_layers();
    state.conv_floats = g.channels() * (g.conv_kernel - 1);
    state.rec_floats = g.v_heads * g.k_dim * g.v_dim;
  }
  return std::make_unique<KvPool>(cfg_.n_attention_layers(), (tokens + block_size - 1) / block_size,
                                  block_size, cfg_.n_kv_heads, cfg_.head_dim, std::move(st), state);
}

void Model::check_backend(const Backend& be) const {
  if (!be.supports_head_dim(cfg_.head_dim))
    fail("[model] backend '{}' cannot run attention with head_dim {}", be.name(), cfg_.head_dim);
  auto check = [&](const WeightRef& w, const std::string& what) {
    if (!be.supports_weight(w.dtype))
      fail("[model] backend '{}' cannot run {} weights ({})", be.name(), dtype_name(w.dtype), what);
  };
  check(w_.embed, "embedding");
  check(w_.lm_head, "lm_head");
  if (cfg_.n_attention_layers() < cfg_.n_layers && !be.supports_hybrid())
    fail("[model] backend '{}' cannot run Gated-DeltaNet layers ({})", be.name(), cfg_.hf_class);
  if (cfg_.moe.n_experts > 0 && !be.supports_moe())
    fail("[model] backend '{}' cannot run mixture-of-experts layers ({})", be.name(),
         cfg_.hf_class);
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    for_each_read_matrix(w_.layers[l], 1,
                         [&](const WeightRef& w, double) { check(w, fmt::format("layer {}", l)); });
    for (const auto* v : {&w_.layers[l].ex_gate, &w_.layers[l].ex_up, &w_.layers[l].ex_down})
      if (!v->empty() && !be.supports_expert_weight(v->front().dtype))
        fail("[model] backend '{}' cannot run {} routed experts (layer {}); the CPU backend can",
             be.name(), dtype_name(v->front().dtype), l);
  }
}

void Model::bind(Backend& be) {
  if (bound_.backend == be.id()) return;
  check_backend(be);
  Bound b;
  auto vec = [&](const std::vector<float>& v) {
    return v.empty() ? nullptr : be.prepare_vector(v.data(), int64_t(v.size()));
  };
  if (base_ && base_->bound_.backend == be.id()) {  // an MTP head: the model's own copies
    b.embed = base_->bound_.embed;
    b.lm_head = base_->bound_.lm_head;
  } else {
    b.embed = be.prepare_weight(w_.embed);
    // A tied head is the embedding: one resident copy.
    b.lm_head = w_.lm_head.data == w_.embed.data ? b.embed : be.prepare_weight(w_.lm_head);
  }
  b.out_norm = vec(w_.out_norm);
  b.inv_freq = vec(inv_freq_);
  auto mat = [&](const WeightRef& w) { return w.data ? be.prepare_weight(w) : WeightRef{}; };
  if (mtp_in_) {
    b.fc_embed = mat(mtp_in_->fc_embed), b.fc_hidden = mat(mtp_in_->fc_hidden);
    b.norm_embed = vec(mtp_in_->norm_embed), b.norm_hidden = vec(mtp_in_->norm_hidden);
  }
  int64_t n_attn = 0, n_lin = 0;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerWeights& L = w_.layers[l];
    BoundLayer d;
    d.cache_layer = cfg_.is_linear(int64_t(l)) ? n_lin++ : n_attn++;
    d.attn_norm = vec(L.attn_norm), d.ffn_norm = vec(L.ffn_norm);
    d.q_norm = vec(L.q_norm), d.k_norm = vec(L.k_norm);
    d.bq = vec(L.bq), d.bk = vec(L.bk), d.bv = vec(L.bv), d.bo = vec(L.bo);
    d.wq = mat(L.wq), d.wk = mat(L.wk), d.wv = mat(L.wv), d.wo = mat(L.wo);
    d.wq_gate = mat(L.wq_gate);
    d.w_gate = mat(L.w_gate), d.w_up = mat(L.w_up), d.w_down = mat(L.w_down);
    d.gdn_qkv = mat(L.gdn_qkv), d.gdn_z = mat(L.gdn_z), d.gdn_b = mat(L.gdn_b);
    d.gdn_a = mat(L.gdn_a), d.gdn_out = mat(L.gdn_out);
    d.gdn_conv = vec(L.gdn_conv), d.gdn_A_log = vec(L.gdn_A_log);
    d.gdn_dt_bias = vec(L.gdn_dt_bias), d.gdn_norm = vec(L.gdn_norm);
    d.router = mat(L.router), d.shared_gate = mat(L.shared_gate), d.shared_up = mat(L.shared_up);
    d.shared_down = mat(L.shared_down), d.shared_router = mat(L.shared_router);
    for (const WeightRef& w : L.ex_gate) d.ex_gate.push_back(mat(w));
    for (const WeightRef& w : L.ex_up) d.ex_up.push_back(mat(w));
    for (const WeightRef& w : L.ex_down) d.ex_down.push_back(mat(w));
    b.layers.push_back(std::move(d));
  }
  b.backend = be.id();
  bound_ = std::move(b);
}

// The intermediates of one pass of T rows (`rows` of them needing logits) as a program for the
// scratch planner (src/memory): op indices follow Model::forward. Buffers that carry values
// from one layer to the next (the residual stream x, the projection output o, the normed input
// xn, the rotary tables) live for the whole pass; q/k/v/att die before the MLP's gate/up/act
// are born, so they share bytes. Nothing here grows with the context.
memory::Program Model::scratch_program(const Backend& be, int64_t T, int64_t rows) const {
  const ModelConfig& c = cfg_;
  const GdnConfig& g = c.gdn;
  const bool hybrid = c.n_attention_layers()<c.n_layers, moe = c.moe.n_experts> 0;
  bool dense = false;
  for (int64_t l = 0; l < c.n_layers; ++l) dense = dense || !c.is_moe(l);
  const int64_t E = c.hidden, HD = c.n_heads * c.head_dim, KD = c.n_kv_heads * c.head_dim,
                F = std::max(dense ? c.intermediate : 0, c.moe.shared_intermediate),
                half = c.rope.dim / 2, AD = std::max(HD, hybrid ? g.value_dim() : 0);
  const size_t act = dtype_bytes(be.act_dtype(), 1), f32 = 4;
  auto n = [](int64_t a, int64_t b, size_t bytes) { return size_t(a * b) * bytes; };
  memory::Program p;
  std::vector<int> dies_at_7, dies_at_11;
  p.op();  // 0 embedding
  const int x = p.value("x", n(T, E, f32)), o = p.value("o", n(T, E, f32));
  p.op();  // 1 rope angles
  const int cs = p.value("cos", n(T, half, f32)), sn = p.value("sin", n(T, half, f32));
  p.op();  // 2 attention norm
  const int xn = p.value("xn", n(std::max(T, rows), E, act));
  p.op();  // 3 q/k/v projections (GDN: its four input projections)
  const int q = p.value("q", n(T, HD, f32)), k = p.value("k", n(T, KD, f32)),
            v = p.value("v", n(T, KD, f32));
  if (c.attn_output_gate) dies_at_7.push_back(p.value("qgate", n(T, HD, f32)));
  if (hybrid) {
    for (auto [name, w] : {std::pair{"mix", g.channels()},
                           {"z", g.value_dim()},
                           {"gb", g.v_heads},
                           {"ga", g.v_heads}})
      dies_at_7.push_back(p.value(name, n(T, w, f32)));
  }
  p.op();  // 4 q/k norm, rope
  p.op();  // 5 K/V into the cache
  p.use(k), p.use(v);
  p.op();  // 6 attention (GDN: the recurrence)
  p.use(q);
  const int att = p.value("att", n(T, AD, act));
  if (hybrid) dies_at_7.push_back(p.value("gout", n(T, g.value_dim(), f32)));
  p.op();  // 7 output gate / gated norm, output projection
  p.use(att);
  for (int id : dies_at_7) p.use(id);
  p.op();  // 8 residual add + MLP norm
  p.op();  // 9 gate/up projections (MoE: router logits, shared expert and its gate)
  const int gate = p.value("gate", n(T, F, f32)), up = p.value("up", n(T, F, f32));
  if (moe) {
    dies_at_11.push_back(p.value("rlog", n(T, c.moe.n_experts, f32)));
    if (c.moe.shared_intermediate > 0) {
      dies_at_11.push_back(p.value("shared", n(T, E, f32)));
      dies_at_11.push_back(p.value("sgate", n(T, 1, f32)));
    }
  }
  p.op();  // 10 swiglu
  p.use(gate), p.use(up);
  const int a = p.value("act", n(T, F, act));
  p.op();  // 11 down projection (MoE: the experts, the gated shared expert)
  p.use(a);
  for (int id : dies_at_11) p.use(id);
  p.op();  // 12 final norm, LM head
  if (!be.host_memory()) {
    p.value("logits", n(rows, c.vocab, f32));
    p.value("argmax", n(rows, 1, 4));
  }
  for (int id : {x, o, cs, sn, xn}) p.use(id);
  return p;
}

std::string Model::scratch_report(const Backend& be, int64_t T, int64_t rows) const {
  const memory::Program p = scratch_program(be, T, rows);
  return memory::describe(p.values(), memory::plan(p.values()));
}

void Model::ensure_scratch(Backend& be, int64_t T, int64_t rows) {
  Scratch& s = scratch_;
  if (s.backend == be.id() && T <= s.T && rows <= s.rows) return;
  if (s.backend == be.id()) {
    T = std::max(T, s.T), rows = std::max(rows, s.rows);
    be.dealloc(s.arena);
  }
  const memory::Program prog = scratch_program(be, T, rows);
  const memory::Plan plan = memory::plan(prog.values());
  s.arena = be.alloc(plan.peak);
  s.logits = nullptr;
  const std::map<std::string, void**> slot = {{"x", reinterpret_cast<void**>(&s.x)},
                                              {"o", reinterpret_cast<void**>(&s.o)},
                                              {"cos", reinterpret_cast<void**>(&s.cos)},
                                              {"sin", reinterpret_cast<void**>(&s.sin)},
                                              {"xn", &s.xn},
                                              {"q", reinterpret_cast<void**>(&s.q)},
                                              {"k", reinterpret_cast<void**>(&s.k)},
                                              {"v", reinterpret_cast<void**>(&s.v)},
                                              {"att", &s.att},
                                              {"gate", reinterpret_cast<void**>(&s.gate)},
                                              {"up", reinterpret_cast<void**>(&s.up)},
                                              {"act", &s.act},
                                              {"argmax", reinterpret_cast<void**>(&s.argmax)},
                                              {"logits", reinterpret_cast<void**>(&s.logits)},
                                              {"qgate", reinterpret_cast<void**>(&s.qgate)},
                                              {"mix", reinterpret_cast<void**>(&s.mix)},
                                              {"z", reinterpret_cast<void**>(&s.z)},
                                              {"gb", reinterpret_cast<void**>(&s.gb)},
                                              {"ga", reinterpret_cast<void**>(&s.ga)},
                                              {"gout", reinterpret_cast<void**>(&s.gout)},
                                              {"rlog", reinterpret_cast<void**>(&s.rlog)},
                                              {"shared", reinterpret_cast<void**>(&s.shared)},
                                              {"sgate", reinterpret_cast<void**>(&s.sgate)}};
  for (size_t i = 0; i < prog.values().size(); ++i)
    *slot.at(prog.values()[i].name) = static_cast<char*>(s.arena) + plan.offsets[i];
  s.be = &be;
  s.backend = be.id();
  s.T = T, s.rows = rows;
  ++s.generation;
  scratch_bytes_ = plan.peak;
}

void Model::forward(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
                    float* logits, bool all_logits, int32_t* argmax, bool keep_hidden,
                    std::span<const int32_t> snaps) {
  if (!pool.reserve(seq, int64_t(tokens.size())))
    fail("[model] the KV cache is full: {} + {} positions do not fit", seq.length, tokens.size());
  const BatchItem item{&seq, tokens, all_logits, snaps};
  forward(be, pool, std::span(&item, 1), logits, argmax, keep_hidden);
}

std::unique_ptr<Model> Model::mtp_head() const {
  if (!w_.mtp) return nullptr;
  ModelConfig c = cfg_;
  c.n_layers = 1;
  c.linear_layers.clear();
  c.moe_layers.assign(1, w_.mtp->moe);
  c.mtp_layers = 0;
  ModelWeights w;
  w.embed = w_.embed;
  w.lm_head = w_.lm_head;
  w.out_norm = w_.mtp->norm;
  w.layers.push_back(w_.mtp->layer);
  auto head = std::make_unique<Model>(std::move(c), std::move(w), ckpt_);
  head->mtp_in_ = w_.mtp;
  head->base_ = this;
  return head;
}

void Model::forward_mtp(Backend& be, KvPool& pool, KvSequence& seq,
                        std::span<const int32_t> tokens, const float* hidden, float* logits,
                        bool all_logits, int32_t* argmax, bool keep_hidden) {
  if (!mtp_in_) fail("[model] forward_mtp: this model is not an MTP head");
  mtp_hidden_ = hidden;
  forward(be, pool, seq, tokens, logits, all_logits, argmax, keep_hidden);
  mtp_hidden_ = nullptr;
}

void Model::set_taps(std::vector<int64_t> layers) {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i] < -1 || layers[i] > cfg_.n_layers - 2 || (i > 0 && layers[i] <= layers[i - 1]))
      fail("[model] taps must ascend in [-1, {}] (the model has {} layers); got layer {}",
           cfg_.n_layers - 2, cfg_.n_layers, layers[i]);
  taps_ = std::move(layers);
}

size_t Model::hidden_row_bytes(const Backend& be) const {
  return taps_.empty() ? dtype_bytes(be.act_dtype(), size_t(cfg_.hidden))
                       : taps_.size() * size_t(cfg_.hidden) * sizeof(float);
}

void Model::forward_block(Backend& be, KvPool& pool, KvSequence& seq,
                          std::span<const int32_t> tokens, float* logits) {
  if (!be.supports_block_attention())
    fail("[model] the {} backend has no non-causal block attention (DSpark drafters)", be.name());
  if (!taps_.empty()) fail("[model] a DSpark backbone does not tap its own layers");
  block_ = true;
  try {
    forward(be, pool, seq, tokens, logits, true, nullptr, true);
  } catch (...) {
    block_ = false;
    throw;
  }
  block_ = false;
}

void Model::forward_context(Backend& be, KvPool& pool, KvSequence& seq,
                            std::span<const int32_t> tokens, const void* ctx) {
  const ModelConfig& c = cfg_;
  const int64_t n = int64_t(tokens.size()), Hkv = c.n_kv_heads, D = c.head_dim;
  if (n == 0) return;
  if (pool.has_state() || !c.linear_layers.empty() || mtp_in_)
    fail("[model] context rows are for DSpark backbones (attention layers only)");
  if (!pool.reserve(seq, n))
    fail("[model] the KV cache is full: {} + {} positions do not fit", seq.length, n);
  ids_.assign(tokens.begin(), tokens.end());
  pos_.clear(), tables_.clear(), table_sizes_.clear();
  for (int64_t i = 0; i < n; ++i) {
    pos_.push_back(seq.length + i);
    tables_.push_back(seq.blocks.data());
    table_sizes_.push_back(int64_t(seq.blocks.size()));
  }
  bind(be);
  ensure_scratch(be, n, 1);
  PassRows pr;
  pr.T = n, pr.ids = ids_.data(), pr.pos = pos_.data(), pr.tables = tables_.data();
  pr.table_sizes = table_sizes_.data(), pr.block_size = pool.block_size();
  be.begin_pass(pr);
  Scratch& s = scratch_;
  const Bound& w = bound_;
  const uint64_t key = 0x9e3779b97f4a7c15ull ^ (uint64_t(n) << 20) ^ s.generation ^
                       reinterpret_cast<uintptr_t>(pool.k(0)) ^ reinterpret_cast<uintptr_t>(ctx);
  be.run(key, [&] {
    be.rope_angles(w.inv_freq, c.rope.dim / 2, s.cos, s.sin);
    for (const BoundLayer& L : w.layers) {
      be.matmul(ctx, n, L.wk, s.k);
      be.matmul(ctx, n, L.wv, s.v);
      if (L.bk) be.add_bias(s.k, L.bk, n, Hkv * D);
      if (L.bv) be.add_bias(s.v, L.bv, n, Hkv * D);
      if (c.qk_norm) be.head_rmsnorm(s.k, L.k_norm, n * Hkv, D, c.rms_eps);
      be.rope(s.k, n, Hkv, D, c.rope.dim, s.cos, s.sin, c.rope.style);
      be.kv_write(s.k, s.v, pool.k(L.cache_layer), pool.v(L.cache_layer), Hkv, D);
    }
  });
  pool.commit(seq, tokens);
}

void Model::copy_state(Backend& be, KvPool& pool, int32_t dst, int32_t src) {
  const size_t cb = pool.conv_slot_bytes(), rb = pool.rec_slot_bytes();
  for (int64_t l = 0; l < pool.state_spec().layers; ++l) {
    auto at = [](float* base, int32_t slot, size_t bytes) {
      return reinterpret_cast<char*>(base) + size_t(slot) * bytes;
    };
    be.copy(at(pool.conv_state(l), dst, cb), at(pool.conv_state(l), src, cb), cb);
    be.copy(at(pool.rec_state(l), dst, rb), at(pool.rec_state(l), src, rb), rb);
  }
}

void Model::roll_back_state(Backend& be, KvPool& pool, KvSequence& seq, int32_t point,
                            int64_t kept) {
  copy_state(be, pool, seq.slot, point);
  if (const int32_t snap = pool.snapshot_target(seq, kept > 1); snap >= 0)
    copy_state(be, pool, snap, seq.slot);
}

std::vector<uint8_t> Model::state_bytes(Backend& be, KvPool& pool, int32_t slot) const {
  std::vector<uint8_t> out;
  for (int64_t l = 0; l < pool.state_spec().layers; ++l)
    for (auto [base, n] : {std::pair{pool.conv_state(l), pool.conv_slot_bytes()},
                           std::pair{pool.rec_state(l), pool.rec_slot_bytes()}}) {
      out.resize(out.size() + n);
      be.download(out.data() + out.size() - n,
                  reinterpret_cast<const uint8_t*>(base) + size_t(slot) * n, n);
    }
  return out;
}

// Causal GQA attention (optionally with Qwen3.5's per-head output gate): s.xn → s.o.
void Model::attention_block(Backend& be, KvPool& pool, const BoundLayer& L, int64_t T,
                            float scale, int64_t first) {
  const ModelConfig& c = cfg_;
  const int64_t E = c.hidden, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim;
  Scratch& s = scratch_;
  const WeightRef* qkv[] = {&L.wq, &L.wk, &L.wv};
  float* qkv_out[] = {s.q, s.k, s.v};
  be.matmul_n(s.xn, T, 3, qkv, qkv_out);
  if (L.wq_gate.data) be.matmul(s.xn, T, L.wq_gate, s.qgate);
  if (L.bq) be.add_bias(s.q, L.bq, T, H * D);
  if (L.bk) be.add_bias(s.k, L.bk, T, Hkv * D);
  if (L.bv) be.add_bias(s.v, L.bv, T, Hkv * D);
  // Per-head RMSNorm (Qwen3) and RoPE on q and k; this pass's K/V rows go into the cache before
  // attention reads them.
  const int64_t kl = L.cache_layer;
  RopeKvArgs rk;
  rk.q = s.q, rk.k = s.k, rk.v = s.v, rk.k_cache = pool.k(kl), rk.v_cache = pool.v(kl);
  rk.T = T, rk.H = H, rk.Hkv = Hkv, rk.D = D, rk.rot = c.rope.dim;
  rk.cos = s.cos, rk.sin = s.sin, rk.style = c.rope.style;
  if (c.qk_norm) rk.q_norm = L.q_norm, rk.k_norm = L.k_norm, rk.eps = c.rms_eps;
  be.rope_kv_write(rk);
  const size_t act = dtype_bytes(be.act_dtype(), 1);
  void* att = static_cast<char*>(s.att) + size_t(first * H * D) * act;
  const int64_t n = T - first;
  AttentionArgs a;
  a.q = s.q + first * H * D;
  a.out = att;
  a.k = pool.k(kl);
  a.v = pool.v(kl);
  a.T = n, a.H = H, a.Hkv = Hkv, a.D = D, a.block_size = pool.block_size();
  a.block_tables = tables_.data() + first;
  a.pos = pos_.data() + first;
  a.scale = scale;
  a.kv = be.kv_dtype();
  if (block_) a.block_last = pos_.back();  // forward_block: one sequence, rows in order
  be.attention(a);
  if (L.wq_gate.data) be.sigmoid_mul(att, s.qgate + first * H * D, n * H * D);
  be.matmul(att, n, L.wo, s.o + first * E);
  if (L.bo) be.add_bias(s.o + first * E, L.bo, n, E);
}

// Gated DeltaNet: input projections, conv + recurrence (state in the pool's slots), gated
// RMSNorm, output projection: s.xn → s.o.
void Model::gdn_block(Backend& be, KvPool& pool, const BoundLayer& L, int64_t T) {
  const ModelConfig& c = cfg_;
  const GdnConfig& g = c.gdn;
  Scratch& s = scratch_;
  be.matmul(s.xn, T, L.gdn_qkv, s.mix);
  // z with the small b / a projections (whose launches alone would be latency).
  const WeightRef* zba[] = {&L.gdn_z, &L.gdn_b, &L.gdn_a};
  float* zba_out[] = {s.z, s.gb, s.ga};
  be.matmul_n(s.xn, T, 3, zba, zba_out);
  GdnArgs a;
  a.qkv = s.mix, a.b = s.gb, a.a = s.ga;
  a.conv_w = L.gdn_conv, a.A_log = L.gdn_A_log, a.dt_bias = L.gdn_dt_bias;
  a.conv_state = pool.conv_state(L.cache_layer);
  a.rec_state = pool.rec_state(L.cache_layer);
  a.out = s.gout;
  a.T = T, a.Hk = g.k_heads, a.Hv = g.v_heads, a.Dk = g.k_dim, a.Dv = g.v_dim;
  a.K = g.conv_kernel;
  be.gdn(a);
  be.gated_rmsnorm(s.gout, s.z, L.gdn_norm, s.att, T * g.v_heads, g.v_dim, c.rms_eps);
  be.matmul(s.att, T, L.gdn_out, s.o);
}

// Routed experts (+ the sigmoid-gated shared expert): s.xn → s.o.
void Model::moe_block(Backend& be, const BoundLayer& L, int64_t T) {
  const ModelConfig& c = cfg_;
  const MoeConfig& m = c.moe;
  Scratch& s = scratch_;
  be.matmul(s.xn, T, L.router, s.rlog);
  MoeArgs a;
  a.x = s.xn, a.router = s.rlog, a.out = s.o;
  a.T = T, a.E = c.hidden, a.F = m.intermediate, a.n_experts = m.n_experts, a.top_k = m.top_k;
  a.norm_topk = m.norm_topk;
  a.gate = L.ex_gate.data(), a.up = L.ex_up.data(), a.down = L.ex_down.data();
  be.moe(a);
  if (m.shared_intermediate > 0) {
    const WeightRef* shared[] = {&L.shared_gate, &L.shared_up, &L.shared_router};
    float* shared_out[] = {s.gate, s.up, s.sgate};
    be.matmul_n(s.xn, T, 3, shared, shared_out);
    be.swiglu(s.gate, s.up, s.act, T * m.shared_intermediate);
    be.matmul(s.act, T, L.shared_down, s.shared);
    be.gated_add(s.o, s.shared, s.sgate, T, c.hidden);
  }
}

void Model::forward(Backend& be, KvPool& pool, std::span<const BatchItem> batch, float* logits,
                    int32_t* argmax, bool keep_hidden) {
  const ModelConfig& c = cfg_;
  const int64_t E = c.hidden, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim, F = c.intermediate,
                V = c.vocab;
  // Rows of the pass: each item's tokens in order, with their positions and block tables.
  ids_.clear();
  pos_.clear();
  tables_.clear();
  table_sizes_.clear();
  slots_.clear();
  snaps_.clear();
  const bool hybrid = pool.has_state();
  bool any_snap = false;
  int64_t rows = 0;  // rows that need logits
  // Item rows [from, n) need logits: its last row, or all of them.
  auto logits_from = [](const BatchItem& it) {
    const int64_t n = int64_t(it.tokens.size());
    return it.all_logits ? 0 : std::max<int64_t>(n - 1, 0);
  };
  int64_t out_start = -1, out_end = -1;  // the rows needing logits, if one run [start, end)
  bool out_run = true;
  uint64_t key = 0xcbf29ce484222325ull;
  auto mix = [&key](uint64_t v) { key = (key ^ v) * 0x100000001b3ull; };
  for (const BatchItem& it : batch) {
    const int64_t n = int64_t(it.tokens.size());
    if (!it.snaps.empty() && (!hybrid || int64_t(it.snaps.size()) != n))
      fail("[model] state snapshots: {} slots for {} tokens{}", it.snaps.size(), n,
           hybrid ? "" : " of a model without recurrent state");
    const int64_t cap = int64_t(it.seq->blocks.size()) * pool.block_size();
    if (it.seq->length + n > cap)
      fail("[model] sequence needs {} positions, {} reserved", it.seq->length + n, cap);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = it.tokens[size_t(i)];
      if (id < 0 || id >= V) fail("[model] token id {} out of range [0, {})", id, V);
      ids_.push_back(id);
      pos_.push_back(it.seq->length + i);
      tables_.push_back(it.seq->blocks.data());
      table_sizes_.push_back(int64_t(it.seq->blocks.size()));
      if (hybrid) slots_.push_back(it.seq->slot);
      if (hybrid) snaps_.push_back(it.snaps.empty() ? -1 : it.snaps[size_t(i)]);
      any_snap |= !it.snaps.empty() && it.snaps[size_t(i)] >= 0;
    }
    if (hybrid && it.seq->slot < 0 && n > 0)
      fail("[model] sequence has no recurrent-state slot (reserve it in the pool first)");
    const int64_t at = int64_t(ids_.size()) - n, from = logits_from(it);
    rows += n - from;
    if (n > from) {
      if (out_start < 0)
        out_start = at + from;
      else if (at + from != out_end)
        out_run = false;
      out_end = at + n;
    }
    mix(uint64_t(n) * 2 + (it.all_logits ? 1 : 0));
  }
  const int64_t T = int64_t(ids_.size());
  if (T == 0) return;
  if (keep_hidden) {  // every row's final hidden state (or its taps), in a buffer of its own
    const size_t need = size_t(T) * hidden_row_bytes(be);
    if (hidden_be_ != be.id() || hidden_bytes_ < need) {
      if (hidden_be_ == be.id()) be.dealloc(hidden_);  // (another backend's: left, as scratch)
      hidden_ = be.alloc(need);
      hidden_be_ = be.id();
      hidden_bytes_ = need;
    }
  }
  if (mtp_in_ && !mtp_hidden_) fail("[model] an MTP head's pass needs the hidden states");

  bind(be);
  ensure_scratch(be, T, rows);
  for (const BatchItem& it : batch)  // a reused prefix brings the state at its end
    if (it.seq->restore >= 0) {
      copy_state(be, pool, it.seq->slot, it.seq->restore);
      pool.restored(*it.seq);
    }
  const Bound& w = bound_;
  Scratch& s = scratch_;
  const size_t act = dtype_bytes(be.act_dtype(), 1);
  auto act_row = [&](void* base, int64_t row, int64_t n) {
    return static_cast<char*>(base) + size_t(row * n) * act;
  };
  PassRows pr;
  pr.T = T, pr.ids = ids_.data(), pr.pos = pos_.data(), pr.tables = tables_.data();
  pr.table_sizes = table_sizes_.data(), pr.block_size = pool.block_size();
  pr.slots = hybrid ? slots_.data() : nullptr;
  pr.snaps = any_snap ? snaps_.data() : nullptr;
  be.begin_pass(pr);
  // The program's identity: the row layout, the arena and the cache it writes.
  mix(uint64_t(T)), mix(s.generation);
  mix(c.n_attention_layers() > 0 ? reinterpret_cast<uintptr_t>(pool.k(0)) : 0);
  if (hybrid) mix(reinterpret_cast<uintptr_t>(pool.rec_state(0)));
  mix(argmax ? 1 : 0);
  mix(keep_hidden ? reinterpret_cast<uintptr_t>(hidden_) : 0);
  mix(reinterpret_cast<uintptr_t>(mtp_hidden_));
  mix(keep_hidden ? taps_.size() : 0), mix(block_ ? 1 : 0);
  for (const int64_t l : taps_) mix(uint64_t(l + 1));
  int32_t* ids_out = be.host_memory() ? argmax : s.argmax;
  float* out = be.host_memory() ? logits : s.logits;

  // The last layer takes only the rows whose outputs are read (llama.cpp does the same): when
  // those are a suffix [last_first, T) of the pass (one sequence's prompt: its last row), the
  // rows before it stop after the layer's K/V rows are in the cache. Host backends only; a
  // row's arithmetic is unchanged, so are the logits.
  int64_t last_first = 0;
  if (const int64_t L = c.n_layers - 1; be.host_memory() && !keep_hidden && L >= 0 &&
                                        !c.is_linear(L) && !c.is_moe(L) && out_run &&
                                        out_start > 0 && out_end == T)
    last_first = out_start;
  mix(uint64_t(last_first));

  be.run(key, [&] {
    const float scale = 1.0f / std::sqrt(float(D));
    const int64_t half = c.rope.dim / 2;
    (void)H, (void)Hkv;
    be.embedding(w.embed, s.x);
    if (mtp_in_) {  // MTP head: x = fc_e · norm_e(embedding) + fc_h · norm_h(hidden)
      be.rmsnorm(s.x, w.norm_embed, s.xn, T, E, c.rms_eps);
      be.matmul(s.xn, T, w.fc_embed, s.o);
      be.rmsnorm(mtp_hidden_, w.norm_hidden, s.xn, T, E, c.rms_eps);
      be.matmul(s.xn, T, w.fc_hidden, s.x);
      be.add(s.x, s.o, T * E);
    }
    be.rope_angles(w.inv_freq, half, s.cos, s.sin);
    // Taps: the residual stream after layer `l` (-1: the embedding) into column block i.
    const bool tapping = keep_hidden && !taps_.empty();
    const size_t row = size_t(E) * sizeof(float);  // a row of the (f32) residual stream
    auto tap = [&](int64_t l) {
      for (size_t i = 0; tapping && i < taps_.size(); ++i)
        if (taps_[i] == l)
          be.copy_rows(static_cast<char*>(hidden_) + i * row, taps_.size() * row, s.x, row, row, T);
    };
    tap(-1);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const BoundLayer& L = w.layers[size_t(l)];
      if (l == 0) {
        be.rmsnorm(s.x, L.attn_norm, s.xn, T, E, c.rms_eps);
      } else {  // the previous layer's MLP output joins the residual stream
        be.add_rmsnorm(s.x, s.o, L.attn_norm, s.xn, T, E, c.rms_eps);
        tap(l - 1);
      }
      const int64_t f = l == c.n_layers - 1 ? last_first : 0, n = T - f;  // rows [f, T)
      if (c.is_linear(l)) {
        gdn_block(be, pool, L, T);
      } else {
        attention_block(be, pool, L, T, scale, f);
      }
      be.add_rmsnorm(s.x + f * E, s.o + f * E, L.ffn_norm, act_row(s.xn, f, E), n, E, c.rms_eps);
      if (c.is_moe(l)) {
        moe_block(be, L, T);
      } else {
        be.matmul_swiglu(act_row(s.xn, f, E), n, L.w_gate, L.w_up, s.gate + f * F, s.up + f * F,
                         act_row(s.act, f, F));
        be.matmul(act_row(s.act, f, F), n, L.w_down, s.o + f * E);
      }
    }
    be.add(s.x + last_first * E, s.o + last_first * E, (T - last_first) * E);
    // keep_hidden: the final norm of every row, kept apart.
    if (keep_hidden && !tapping) be.rmsnorm(s.x, w.out_norm, hidden_, T, E, c.rms_eps);
    // Final norm and LM head on the rows that need logits only.
    int64_t r = 0, first = 0;
    for (const BatchItem& it : batch) {
      const int64_t n = int64_t(it.tokens.size()), from = logits_from(it);
      if (n > from) {
        be.rmsnorm(s.x + (first + from) * E, w.out_norm, act_row(s.xn, r, E), n - from, E,
                   c.rms_eps);
        r += n - from;
      }
      first += n;
    }
    be.matmul(s.xn, r, w.lm_head, out);
    if (argmax) be.argmax_rows(out, r, V, ids_out);
  });
  for (const BatchItem& it : batch) pool.commit(*it.seq, it.tokens);
  // Hybrid models: keep the state of sequences that stopped on a block boundary (prefix cache).
  if (hybrid)
    for (const BatchItem& it : batch)
      if (!it.tokens.empty())
        if (const int32_t snap = pool.snapshot_target(*it.seq, it.tokens.size() > 1); snap >= 0)
          copy_state(be, pool, snap, it.seq->slot);
  if (be.host_memory()) return;
  if (argmax)
    be.download(argmax, s.argmax, size_t(rows) * sizeof(int32_t));
  else
    be.download(logits, s.logits, size_t(rows * V) * sizeof(float));
}

}  // namespace basalt
