#include "engine/dspark.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/checkpoint.h"
#include "models/arch.h"
#include "ops/ref/ref_ops.h"

namespace basalt {

namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// y = W · x (+ b) for one row x: W [N, K] f32 row-major (the scalar reference matmul).
void gemv(const std::vector<float>& w, const float* x, const float* b, int64_t N, int64_t K,
          float* y) {
  ref::matmul(x, 1, WeightRef{DType::F32, N, K, w.data()}, y);
  if (b)
    for (int64_t n = 0; n < N; ++n) y[n] += b[n];
}

// A drafter without its copies of the target's embedding / LM head (basalt's own drafters ship
// without them: DeepSpec keeps them frozen, equal to the target's) gets the target's, copied.
void borrow(io::TensorStore& ts, const std::string& name, const Model& target, bool head,
            const std::string& path) {
  if (ts.contains(name)) return;
  const io::Checkpoint& tc = target.checkpoint();
  const bool gguf = tc.format == io::CheckpointFormat::Gguf;
  const std::string embed =
      gguf ? "token_embd.weight" : target.config().tensor_prefix + "embed_tokens.weight";
  std::string src = head ? (gguf ? "output.weight" : "lm_head.weight") : embed;
  if (head && !tc.tensors.contains(src)) src = embed;  // tied
  const TensorView* t = tc.tensors.find(src);
  const ModelConfig& c = target.config();
  if (!t || t->shape != std::vector<int64_t>{c.vocab, c.hidden} ||
      !(t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16))
    fail(
        "[spec] {}: the drafter has no '{}' and the target's '{}' is not a dense [{}, {}] matrix "
        "to take instead",
        path, name, src, c.vocab, c.hidden);
  Blob b = blob_from_vector(std::vector<uint8_t>(t->data, t->data + t->nbytes), name);
  TensorView v = *t;
  v.name = name;
  v.data = b.data;
  ts.keep(b);
  ts.add(v);
}

}  // namespace

void DSparkHead::chain(const float* base, const float* hidden, int32_t anchor, int64_t B,
                       int32_t* tokens, float* step_logits, float* conf) const {
  const int64_t r = rank;
  std::vector<float> row(static_cast<size_t>(V)), bias(static_cast<size_t>(V));
  std::vector<float> e(static_cast<size_t>(r)), state(static_cast<size_t>(r), 0.0f), z, proj;
  int32_t prev = anchor;
  for (int64_t k = 0; k < B; ++k) {
    const float* h = hidden + k * E;
    std::copy_n(base + k * V, V, row.data());
    if (r > 0) std::copy_n(w1.data() + int64_t(prev) * r, r, e.data());
    if (conf && !confidence) conf[k] = 1.0f;
    if (conf && confidence) {  // the slot's confidence, from its hidden row and the token before
      float s = conf_b;
      for (int64_t i = 0; i < E; ++i) s += conf_w[size_t(i)] * h[i];
      if (confidence_markov)
        for (int64_t i = 0; i < r; ++i) s += conf_w[size_t(E + i)] * e[size_t(i)];
      conf[k] = sigmoid(s);
    }
    if (markov != Markov::None) {
      std::vector<float> lat = e;  // the rank-r vector W2 maps to a bias over the vocabulary
      if (markov == Markov::Gated) {
        z.assign(h, h + E);
        z.insert(z.end(), e.begin(), e.end());
        proj.resize(size_t(r));
        gemv(gate_w, z.data(), gate_b.data(), r, E + r, proj.data());
        for (int64_t i = 0; i < r; ++i) lat[size_t(i)] = sigmoid(proj[size_t(i)]) * e[size_t(i)];
      } else if (markov == Markov::Rnn) {
        z.assign(state.begin(), state.end());
        z.insert(z.end(), e.begin(), e.end());
        z.insert(z.end(), h, h + E);
        proj.resize(size_t(3 * r));
        gemv(joint_w, z.data(), joint_b.data(), 3 * r, 2 * r + E, proj.data());
        for (int64_t i = 0; i < r; ++i) {
          const float g = sigmoid(proj[size_t(i)]), c = std::tanh(proj[size_t(r + i)]);
          state[size_t(i)] = g * state[size_t(i)] + (1.0f - g) * c;
          lat[size_t(i)] = std::tanh(proj[size_t(2 * r + i)]);
        }
      }
      // bias = w2 · lat, each element summed over i = 0 … r-1 in order (a plain dot's order)
      // but across the vocabulary at once: a dot a row was latency-bound, most of a draft.
      std::fill(bias.begin(), bias.end(), 0.0f);
      for (int64_t i = 0; i < r; ++i) {
        const float li = lat[size_t(i)], *wt = w2t.data() + i * V;
        for (int64_t v = 0; v < V; ++v) bias[size_t(v)] += li * wt[v];
      }
      for (int64_t v = 0; v < V; ++v) row[size_t(v)] += bias[size_t(v)];
    }
    const int32_t t = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    if (step_logits) std::copy(row.begin(), row.end(), step_logits + k * V);
    tokens[k] = t;
    prev = t;
  }
}

std::shared_ptr<DSparkHead> dspark_load(const std::string& path, const Model& target) {
  using namespace models;
  io::Checkpoint ck = io::checkpoint_open(path);
  const std::string file = path + "/config.json";
  const nlohmann::json cfg = ck.config;
  auto d = std::make_shared<DSparkHead>();
  const ModelConfig& tc = target.config();
  borrow(ck.tensors, "embed_tokens.weight", target, false, path);
  borrow(ck.tensors, "lm_head.weight", target, true, path);
  d->backbone = dspark_backbone(std::move(ck));
  const io::TensorStore& ts = d->backbone->checkpoint().tensors;
  auto rd = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return tensor_floats(ts, name, shape, "spec", path);
  };
  const ModelConfig& c = d->backbone->config();
  d->E = c.hidden, d->V = c.vocab;
  if (c.vocab != tc.vocab || c.hidden != tc.hidden)
    fail("[spec] {}: the drafter has vocab {} and hidden size {}, the target {} and {}", path,
         c.vocab, c.hidden, tc.vocab, tc.hidden);
  const int64_t nt = cfg_int(cfg, "num_target_layers", file);
  if (nt != tc.n_layers)
    fail("[spec] {}: the drafter was made for a target of {} layers; this one has {}", path, nt,
         tc.n_layers);
  auto ids = cfg.find("target_layer_ids");
  if (ids == cfg.end() || !ids->is_array() || ids->empty())
    fail("[config] {}: missing key 'target_layer_ids'", file);
  for (const auto& v : *ids) {
    if (!v.is_number_integer()) fail("[config] {}: 'target_layer_ids' must be integers", file);
    d->taps.push_back(v.get<int64_t>());
  }
  for (size_t i = 0; i < d->taps.size(); ++i)
    if (d->taps[i] < -1 || d->taps[i] > nt - 2 || (i > 0 && d->taps[i] <= d->taps[i - 1]))
      fail("[config] {}: target_layer_ids must ascend in [-1, {}]; got {}", file, nt - 2,
           d->taps[i]);
  d->block = cfg_int(cfg, "block_size", file);
  if (d->block < 1 || d->block > 64)
    fail("[config] {}: block_size {} not in [1, 64]", file, d->block);
  const int64_t mask = cfg_int(cfg, "mask_token_id", file);
  if (mask < 0 || mask >= c.vocab)
    fail("[config] {}: mask_token_id {} is not in the vocabulary [0, {})", file, mask, c.vocab);
  d->mask_id = int32_t(mask);
  d->rank = cfg_int_or(cfg, "markov_rank", 0, file);
  if (d->rank < 0) fail("[config] {}: markov_rank {} is negative", file, d->rank);
  const int64_t E = d->E, V = d->V, r = d->rank, n = int64_t(d->taps.size());
  std::string kind = "none";
  if (r > 0) {
    kind = cfg.contains("markov_head_type") && cfg["markov_head_type"].is_string()
               ? cfg["markov_head_type"].get<std::string>()
               : "";
    if (kind == "vanilla")
      d->markov = DSparkHead::Markov::Vanilla;
    else if (kind == "gated")
      d->markov = DSparkHead::Markov::Gated;
    else if (kind == "rnn")
      d->markov = DSparkHead::Markov::Rnn;
    else
      fail("[config] {}: markov_head_type '{}' (vanilla, gated or rnn expected)", file, kind);
    d->w1 = rd("markov_head.markov_w1.weight", {V, r});
    const std::vector<float> w2 = rd("markov_head.markov_w2.weight", {V, r});
    d->w2t.resize(w2.size());
    for (int64_t v = 0; v < V; ++v)
      for (int64_t i = 0; i < r; ++i) d->w2t[size_t(i * V + v)] = w2[size_t(v * r + i)];
    if (d->markov == DSparkHead::Markov::Gated) {
      d->gate_w = rd("markov_head.gate_proj.weight", {r, E + r});
      d->gate_b = rd("markov_head.gate_proj.bias", {r});
    } else if (d->markov == DSparkHead::Markov::Rnn) {
      d->joint_w = rd("markov_head.joint_proj.weight", {3 * r, 2 * r + E});
      d->joint_b = rd("markov_head.joint_proj.bias", {3 * r});
    }
  }
  d->confidence = cfg_bool_or(cfg, "enable_confidence_head", false, file);
  if (d->confidence) {
    d->confidence_markov = cfg_bool_or(cfg, "confidence_head_with_markov", false, file);
    if (d->confidence_markov && r == 0)
      fail("[config] {}: confidence_head_with_markov needs a Markov head (markov_rank > 0)", file);
    const int64_t in = E + (d->confidence_markov ? r : 0);
    d->conf_w = rd("confidence_head.proj.weight", {1, in});
    d->conf_b = rd("confidence_head.proj.bias", {1})[0];
  }
  d->fc_data = rd("fc.weight", {E, n * E});
  d->fc = WeightRef{DType::F32, E, n * E, d->fc_data.data()};
  d->hidden_norm = rd("hidden_norm.weight", {E});
  spdlog::info(
      "loaded DSpark drafter {}: {} layers, block {}, taps of target layers [{}], Markov {} "
      "(rank {}), confidence head {}",
      path, c.n_layers, d->block, fmt::join(d->taps, ", "), kind, r,
      d->confidence ? (d->confidence_markov ? "with Markov features" : "on") : "off");
  return d;
}

}  // namespace basalt
