// Builds a Model from a checkpoint: picks the architecture, reads its config, binds tensors
// (shared HF / GGUF naming for the Llama family) and checks every shape against the config.
#include <fmt/ranges.h>

#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "models/arch.h"

namespace basalt {
namespace models {

const std::vector<const ArchSpec*>& arch_all() {
  static const std::vector<const ArchSpec*> all = {&arch_llama(), &arch_qwen3()};
  return all;
}

namespace {

struct Names {  // tensor names of one format
  std::string embed, out_norm, lm_head;
  std::string (*layer)(int64_t l, const char* part);
};

std::string hf_layer(int64_t l, const char* part) {
  static const std::map<std::string, std::string> m = {
      {"attn_norm", "input_layernorm.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
      {"q", "self_attn.q_proj.weight"},        {"k", "self_attn.k_proj.weight"},
      {"v", "self_attn.v_proj.weight"},        {"o", "self_attn.o_proj.weight"},
      {"bq", "self_attn.q_proj.bias"},         {"bk", "self_attn.k_proj.bias"},
      {"bv", "self_attn.v_proj.bias"},         {"bo", "self_attn.o_proj.bias"},
      {"q_norm", "self_attn.q_norm.weight"},   {"k_norm", "self_attn.k_norm.weight"},
      {"gate", "mlp.gate_proj.weight"},        {"up", "mlp.up_proj.weight"},
      {"down", "mlp.down_proj.weight"}};
  return fmt::format("model.layers.{}.{}", l, m.at(part));
}

std::string gguf_layer(int64_t l, const char* part) {
  static const std::map<std::string, std::string> m = {{"attn_norm", "attn_norm.weight"},
                                                       {"ffn_norm", "ffn_norm.weight"},
                                                       {"q", "attn_q.weight"},
                                                       {"k", "attn_k.weight"},
                                                       {"v", "attn_v.weight"},
                                                       {"o", "attn_output.weight"},
                                                       {"bq", "attn_q.bias"},
                                                       {"bk", "attn_k.bias"},
                                                       {"bv", "attn_v.bias"},
                                                       {"bo", "attn_output.bias"},
                                                       {"q_norm", "attn_q_norm.weight"},
                                                       {"k_norm", "attn_k_norm.weight"},
                                                       {"gate", "ffn_gate.weight"},
                                                       {"up", "ffn_up.weight"},
                                                       {"down", "ffn_down.weight"}};
  return fmt::format("blk.{}.{}", l, m.at(part));
}

class Binder {
 public:
  Binder(const io::TensorStore& ts, std::string arch, std::string file, ModelWeights& w)
      : ts_(ts), arch_(std::move(arch)), file_(std::move(file)), w_(w) {}

  const TensorView& get(const std::string& name) const {
    const TensorView* t = ts_.find(name);
    if (!t) fail("[{}] {}: missing tensor '{}'", arch_, file_, name);
    return *t;
  }

  void check_shape(const TensorView& t, std::vector<int64_t> want) const {
    if (t.shape != want)
      fail("[{}] {}: tensor '{}' has shape {}, the config implies {}", arch_, file_, t.name,
           shape_str(t.shape), shape_str(want));
  }

  // A [rows, cols] matrix, zero-copy where the matmul kernels read its dtype.
  WeightRef matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorView& t = get(name);
    check_shape(t, {rows, cols});
    WeightRef r{t.dtype, rows, cols, t.data};
    switch (t.dtype) {
      case DType::F32:
      case DType::F16:
      case DType::BF16:
        return r;
      case DType::Q8_0:
      case DType::Q4_0:
      case DType::Q4_K:
      case DType::Q5_K:
      case DType::Q6_K:
        if (cols % dtype_block_elems(t.dtype) != 0)
          fail("[{}] {}: {} tensor '{}' rows not whole blocks", arch_, file_, dtype_name(t.dtype),
               name);
        return r;
      case DType::F64:
      case DType::F8_E4M3:
      case DType::F8_E5M2: {
        auto buf = std::make_shared<std::vector<float>>(to_f32(t));
        w_.owned.push_back(buf);
        return WeightRef{DType::F32, rows, cols, buf->data()};
      }
      default:
        fail("[{}] {}: tensor '{}' has dtype {}, which cannot be a weight matrix", arch_, file_,
             name, dtype_name(t.dtype));
    }
  }

  std::vector<float> vec(const std::string& name, int64_t n) {
    const TensorView& t = get(name);
    check_shape(t, {n});
    return to_f32(t);
  }
  bool has(const std::string& name) const { return ts_.contains(name); }

 private:
  std::vector<float> to_f32(const TensorView& t) const {
    if (!dtype_is_float(t.dtype))
      fail("[{}] {}: tensor '{}' has non-float dtype {}", arch_, file_, t.name,
           dtype_name(t.dtype));
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i)
      out[size_t(i)] = float(dtype_read_f64(t.dtype, t.data, i));
    return out;
  }
  const io::TensorStore& ts_;
  std::string arch_, file_;
  ModelWeights& w_;
};

ModelWeights bind_weights(const io::Checkpoint& ck, const ModelConfig& c) {
  const bool gguf = ck.format == io::CheckpointFormat::Gguf;
  Names nm =
      gguf ? Names{"token_embd.weight", "output_norm.weight", "output.weight", gguf_layer}
           : Names{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", hf_layer};
  ModelWeights w;
  Binder b(ck.tensors, c.arch, ck.path, w);
  const int64_t E = c.hidden, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.intermediate,
                V = c.vocab;
  w.embed = b.matrix(nm.embed, V, E);
  w.out_norm = b.vec(nm.out_norm, E);
  if (b.has(nm.lm_head) && !(c.tied_embeddings && !gguf)) {
    w.lm_head = b.matrix(nm.lm_head, V, E);
  } else if (c.tied_embeddings || gguf) {
    w.lm_head = w.embed;  // GGUF omits output.weight when tied
  } else {
    fail("[{}] {}: missing tensor '{}' (tie_word_embeddings is false)", c.arch, ck.path,
         nm.lm_head);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = b.vec(nm.layer(l, "attn_norm"), E);
    L.ffn_norm = b.vec(nm.layer(l, "ffn_norm"), E);
    L.wq = b.matrix(nm.layer(l, "q"), H * D, E);
    L.wk = b.matrix(nm.layer(l, "k"), Hkv * D, E);
    L.wv = b.matrix(nm.layer(l, "v"), Hkv * D, E);
    L.wo = b.matrix(nm.layer(l, "o"), E, H * D);
    if (c.attention_bias || (gguf && b.has(nm.layer(l, "bq")))) {
      L.bq = b.vec(nm.layer(l, "bq"), H * D);
      L.bk = b.vec(nm.layer(l, "bk"), Hkv * D);
      L.bv = b.vec(nm.layer(l, "bv"), Hkv * D);
      if (b.has(nm.layer(l, "bo"))) L.bo = b.vec(nm.layer(l, "bo"), E);
    }
    if (c.qk_norm) {
      L.q_norm = b.vec(nm.layer(l, "q_norm"), D);
      L.k_norm = b.vec(nm.layer(l, "k_norm"), D);
    }
    L.w_gate = b.matrix(nm.layer(l, "gate"), F, E);
    L.w_up = b.matrix(nm.layer(l, "up"), F, E);
    L.w_down = b.matrix(nm.layer(l, "down"), E, F);
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace
}  // namespace models

std::unique_ptr<Model> model_from_checkpoint(io::Checkpoint ck) {
  using namespace models;
  ModelConfig c;
  if (ck.format == io::CheckpointFormat::Gguf) {
    const std::string& arch = ck.gguf->get("general.architecture").as_string();
    const ArchSpec* spec = nullptr;
    for (const ArchSpec* s : arch_all())
      if (s->gguf_arch == arch) spec = s;
    if (!spec)
      fail("[models] {}: unknown architecture '{}' (supported: llama, qwen3)", ck.path, arch);
    spec->from_gguf(*ck.gguf, c);
    if (ck.tensors.size() == 0)
      fail("[models] {}: the file holds no tensors (vocab-only?)", ck.path);
    if (const TensorView* t = ck.tensors.find("token_embd.weight")) c.vocab = t->dim(0);
    if (const TensorView* t = ck.tensors.find("rope_freqs.weight")) {
      for (int64_t i = 0; i < t->numel(); ++i)
        c.rope.freq_factors.push_back(float(dtype_read_f64(t->dtype, t->data, i)));
    }
  } else {
    const std::string file = ck.path + "/config.json";
    if (!ck.config.is_object() || ck.config.empty()) fail("[models] {}: no config.json", ck.path);
    std::string cls;
    if (auto it = ck.config.find("architectures");
        it != ck.config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
      cls = (*it)[0].get<std::string>();
    else
      fail("[config] {}: missing key 'architectures'", file);
    const ArchSpec* spec = nullptr;
    for (const ArchSpec* s : arch_all())
      for (const auto& n : s->hf_classes)
        if (n == cls) spec = s;
    if (!spec)
      fail(
          "[models] {}: unknown architecture '{}' (supported: LlamaForCausalLM, "
          "Qwen3ForCausalLM)",
          file, cls);
    c.hf_class = cls;
    spec->from_hf(ck.config, file, c);
    if (ck.tensors.size() == 0) fail("[models] {}: no model.safetensors", ck.path);
    // generation_config.json's eos list wins over config.json's (as in transformers).
    auto gen_eos = cfg_token_ids(ck.generation_config, "eos_token_id");
    if (!gen_eos.empty()) c.eos_ids = gen_eos;
  }
  if (c.rope.dim > c.head_dim || c.rope.dim % 2 != 0)
    fail("[models] {}: rope dimension {} invalid for head_dim {}", ck.path, c.rope.dim, c.head_dim);
  ModelWeights w = bind_weights(ck, c);
  spdlog::info("loaded {} ({}): {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}", ck.path,
               c.hf_class, c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab);
  return std::make_unique<Model>(std::move(c), std::move(w), std::move(ck));
}

std::unique_ptr<Model> model_load(const std::string& path) {
  return model_from_checkpoint(io::checkpoint_open(path));
}

}  // namespace basalt
